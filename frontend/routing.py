from django.urls import path

from .consumers import StreamConsumer
from .log_consumer import JobLogConsumer

websocket_urlpatterns = [
    path("ws/stream/", StreamConsumer.as_asgi()),
    path("ws/jobs/<id:job_id>/log/", JobLogConsumer.as_asgi()),
]
