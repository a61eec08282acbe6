"""The browsable API root (``/api/v1/``) links only into the API."""

import pytest

pytestmark = pytest.mark.django_db


def test_every_link_of_the_api_root_is_an_api_endpoint(platform, api_as):
    links = api_as(platform["admin"]).get("/api/v1/").json()
    # The portal has pages named like the router's routes ("job-list" is /jobs/): the root once
    # linked "jobs" to the portal's page.
    assert links["jobs"] == "http://testserver/api/v1/jobs/"
    for name, url in links.items():
        assert url == f"http://testserver/api/v1/{name}/", name
        response = api_as(platform["admin"]).get(url, HTTP_ACCEPT="application/json")
        assert response.status_code == 200, (name, response.status_code)
        assert response["Content-Type"].startswith("application/json"), name
