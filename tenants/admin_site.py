"""Django admin's site: platform admins only.

Admin is one global view of every team's rows and of every user, with no team scoping, so the
staff flag and Django's model permissions are not enough to open it: a staff user given "can view
job" read every team's jobs and their env values, and one given "can change user" made
themselves a superuser. The site lets in whom ``is_platform_admin`` lets in (staff as well, as
Django's own site asks); everyone else gets its login page.
"""

from django.contrib import admin
from django.http import HttpRequest

from .permissions import is_platform_admin


class PlatformAdminSite(admin.AdminSite):
    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_staff and is_platform_admin(user))
