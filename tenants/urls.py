"""Portal pages of the tenants app."""

app_name = "tenants"
urlpatterns: list = []
