from django.apps import AppConfig

# The module, not the class: Django picks an app's config from the AppConfig classes its apps
# module holds, and AdminConfig imported by name would be a second candidate for "tenants".
from django.contrib.admin import apps as admin_apps


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Teams and quotas"


class PlatformAdminConfig(admin_apps.AdminConfig):
    """Django admin with its site for platform admins only (``tenants.admin_site``); listed in
    INSTALLED_APPS in place of ``django.contrib.admin``."""

    default = False
    default_site = "tenants.admin_site.PlatformAdminSite"
