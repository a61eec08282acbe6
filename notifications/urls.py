"""Portal pages of notifications, mounted at /notifications/."""

from django.urls import path

from . import views

app_name = "notifications"
urlpatterns = [
    path("settings/", views.settings_page, name="settings"),
    path("webhooks/", views.webhooks, name="webhooks"),
    path("webhooks/<id:webhook_id>/test/", views.webhook_test, name="webhook-test"),
    path("webhooks/<id:webhook_id>/enable/", views.webhook_enable, name="webhook-enable"),
    path("webhooks/<id:webhook_id>/delete/", views.webhook_delete, name="webhook-delete"),
    path("deliveries/", views.deliveries, name="deliveries"),
]
