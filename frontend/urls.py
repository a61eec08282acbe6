"""Portal URLs: pages, the job actions they post to, and the locally served plotly.js."""

from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.home, name="home"),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.job_new, name="job-new"),
    path("jobs/states/", views.job_states, name="job-states"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/status/", views.job_status, name="job-status"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel, name="job-cancel"),
    path("arrays/<int:array_id>/", views.array_detail, name="array-detail"),
    path("arrays/<int:array_id>/state/", views.array_state, name="array-state"),
    path("arrays/<int:array_id>/cancel/", views.array_cancel, name="array-cancel"),
    path("cluster/", views.cluster, name="cluster"),
    path("cluster/state/", views.cluster_state, name="cluster-state"),
    path("cluster/nodes/<int:node_id>/<slug:action>/", views.node_action, name="node-action"),
    path("assets/plotly-<str:version>.min.js", views.plotly_js, name="plotly-js"),
]
