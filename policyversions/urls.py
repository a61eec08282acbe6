from django.urls import path

from . import views

app_name = "policy"

urlpatterns = [
    path("", views.index, name="index"),
    path("diff/", views.diff, name="diff"),
    path("versions/<id:number>/", views.version, name="version"),
    path("versions/<id:number>/rollback/", views.rollback, name="rollback"),
    path("whatif/", views.whatif_index, name="whatif"),
    path("whatif/<id:run_id>/", views.whatif_run, name="whatif-run"),
    path("whatif/<id:run_id>/cancel/", views.whatif_cancel, name="whatif-cancel"),
    path("whatif/<id:run_id>/apply/", views.whatif_apply, name="whatif-apply"),
]
