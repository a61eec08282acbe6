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


def test_no_url_name_is_declared_twice():
    """``reverse()`` answers the last of two routes of one name: an API route named like a
    portal page (the API root's "jobs" link once went to the portal) is a wrong link waiting."""
    from django.urls import URLPattern, URLResolver, get_resolver

    def names(patterns, namespace=()):
        for p in patterns:
            if isinstance(p, URLResolver):
                inner = (*namespace, p.namespace) if p.namespace else namespace
                yield from names(p.url_patterns, inner)
            elif isinstance(p, URLPattern) and p.name:
                yield ":".join((*namespace, p.name))

    declared = list(names(get_resolver().url_patterns))
    assert len(declared) > 100  # the walk reached the apps' routes
    assert sorted({n for n in declared if declared.count(n) > 1}) == []
