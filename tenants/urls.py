"""Portal pages of the tenants app, mounted at /teams/."""

from django.urls import path

from . import views

app_name = "tenants"
urlpatterns = [
    path("", views.index, name="index"),
    path("team/<slug:slug>/", views.team_detail, name="team"),
    path("team/<slug:slug>/members/", views.member_set, name="member-set"),
    path(
        "team/<slug:slug>/members/<str:username>/remove/",
        views.member_remove,
        name="member-remove",
    ),
    path("team/<slug:slug>/quota-requests/new/", views.quota_request_new, name="request-new"),
    path("requests/", views.quota_requests, name="requests"),
    path(
        "requests/<id:pk>/approve/",
        views.quota_request_decide,
        {"decision": "approve"},
        name="request-approve",
    ),
    path(
        "requests/<id:pk>/reject/",
        views.quota_request_decide,
        {"decision": "reject"},
        name="request-reject",
    ),
    path("manage/", views.manage, name="manage"),
    path("manage/quota/", views.manage_quota, name="manage-quota"),
    path("manage/teams/new/", views.manage_team_new, name="manage-team-new"),
    path("manage/teams/<slug:slug>/weight/", views.manage_team_weight, name="manage-team-weight"),
    path("manage/priorities/", views.manage_priority, name="manage-priority"),
    path("manage/entitlements/", views.manage_entitlements, name="manage-entitlements"),
    path(
        "manage/priorities/<slug:name>/delete/",
        views.manage_priority_delete,
        name="manage-priority-delete",
    ),
    path("manage/sso/", views.manage_sso, name="manage-sso"),
    path("manage/sso/<id:pk>/delete/", views.manage_sso_delete, name="manage-sso-delete"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<id:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("audit/", views.audit, name="audit"),
    path("audit.csv", views.audit_csv, name="audit-csv"),
]
