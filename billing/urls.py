"""Portal pages of the billing app."""

app_name = "billing"
urlpatterns: list = []
