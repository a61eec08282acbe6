"""Portal pages of the billing app (mounted at /billing/)."""

from django.urls import path

from . import views

app_name = "billing"
urlpatterns = [
    path("", views.home, name="home"),
    path("overview/", views.overview, name="overview"),
    path("teams/<slug:slug>/", views.team_dashboard, name="team"),
    path("teams/<slug:slug>/budget", views.budget_set, name="budget-set"),
    path("prices/", views.price_book, name="prices"),
    path("statements/", views.statement_list, name="statements"),
    path("statements/<id:pk>/", views.statement_detail, name="statement"),
    path("statements/<id:pk>/csv", views.statement_csv, name="statement-csv"),
    path("statements/<id:pk>/close", views.statement_close, name="statement-close"),
    path("plotly.min.js", views.plotly_js, name="plotly-js"),
]
