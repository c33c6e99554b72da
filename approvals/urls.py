from django.urls import path

from . import views

app_name = "approvals"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("<uuid:plan_id>/", views.plan_detail, name="plan-detail"),
    path("<uuid:plan_id>/decide", views.plan_decide, name="plan-decide"),
]
