"""Portal URLs: pages, the job actions they post to, and the locally served plotly.js."""

from django.urls import path

from tenants import sso

from . import cluster_retirement, outcomes, records, routing_admin, views

urlpatterns = [
    # Both password doors of the portal go through the failed-attempt limits (views.LoginView).
    path("login/", views.LoginView.as_view(), name="login"),
    # With local login off, platform admins still sign in with a password here (break-glass).
    path(
        "login/break-glass/",
        views.LoginView.as_view(extra_context={"break_glass": True}),
        name="login-break-glass",
    ),
    path("logout/", sso.LogoutView.as_view(), name="logout"),
    path("oidc/authenticate/", sso.SsoStartView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", sso.SsoCallbackView.as_view(), name="oidc_authentication_callback"),
    path("", views.home, name="home"),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.job_new, name="job-new"),
    path("jobs/states/", views.job_states, name="job-states"),
    path("jobs/<id:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<id:job_id>/status/", views.job_status, name="job-status"),
    path("jobs/<id:job_id>/cancel/", views.job_cancel, name="job-cancel"),
    path("jobs/<id:job_id>/resubmit/", records.job_resubmit, name="job-resubmit"),
    path(
        "jobs/<id:job_id>/records/<id:attempt>.json",
        records.job_record_json,
        name="job-record-json",
    ),
    path("arrays/<id:array_id>/", views.array_detail, name="array-detail"),
    path("arrays/<id:array_id>/state/", views.array_state, name="array-state"),
    path("arrays/<id:array_id>/cancel/", views.array_cancel, name="array-cancel"),
    path("outcomes/", outcomes.outcomes_page, name="outcomes"),
    path("cluster/", views.cluster, name="cluster"),
    path("cluster/state/", views.cluster_state, name="cluster-state"),
    path("cluster/nodes/<id:node_id>/<slug:action>/", views.node_action, name="node-action"),
    path(
        "cluster/clusters/<slug:name>/<slug:action>/",
        cluster_retirement.cluster_retirement,
        name="cluster-retirement",
    ),
    path("cluster/routing/", routing_admin.routing_facts_page, name="routing-facts"),
    path(
        "cluster/routing/clusters/<slug:name>/",
        routing_admin.routing_cluster_set,
        name="routing-cluster-set",
    ),
    path(
        "cluster/routing/datasets/new/",
        routing_admin.routing_dataset_new,
        name="routing-dataset-new",
    ),
    path(
        "cluster/routing/datasets/<id:dataset_id>/",
        routing_admin.routing_dataset_edit,
        name="routing-dataset-edit",
    ),
    path(
        "cluster/routing/datasets/<id:dataset_id>/delete/",
        routing_admin.routing_dataset_delete,
        name="routing-dataset-delete",
    ),
    path(
        "cluster/routing/teams/<slug:slug>/",
        routing_admin.routing_team_set,
        name="routing-team-set",
    ),
    path("assets/plotly-<str:version>.min.js", views.plotly_js, name="plotly-js"),
    path("csp-report/", views.csp_report, name="csp-report"),
]
