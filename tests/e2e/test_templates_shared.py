"""Templates across workers through a real S3 server (issue: templates and
the object store): a template published on one worker materialises on
another from the store; the catalog is shared; /admin/overview says
templates_shared; the cache budget evicts unused revisions and a later
attach fetches them again.

The S3 server is tests/s3server's s3rver behind a SigV4-checking front,
started here through its wrapper (installed with npm on first use). A host
that cannot run it fails the test with the reason."""
import json
import time
import urllib.request
import uuid
from pathlib import Path

from s3_server import s3  # noqa: F401  (the module-scoped S3 server fixture)
from sandloom_client import Sandbox

def store_env(endpoint, bucket):
    return {"SANDBOX_BLOBSTORE_ENDPOINT": endpoint, "SANDBOX_BLOBSTORE_BUCKET": bucket,
            "BLOBSTORE_ACCESS_KEY": "S3RVER", "BLOBSTORE_SECRET_KEY": "S3RVER",
            "SANDBOX_BLOBSTORE_BASE_PREFIX": "e2e"}


def s3_control(endpoint, method, path):
    """The test S3 server's own control routes (tests/s3server/sigv4-front.js)."""
    with urllib.request.urlopen(urllib.request.Request(endpoint + path, method=method),
                                timeout=10) as r:
        return r.read()


def ready(client, prefix):
    sb = Sandbox(client, f"{prefix}-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def sh(sb, script):
    r = sb.exec(["sh", "-c", script])
    assert r.status == 200, r
    return r.body


def test_template_published_on_one_worker_runs_on_another(s3, daemon_factory):
    bucket = "tpl-" + uuid.uuid4().hex[:10]
    env = store_env(s3, bucket)
    # Two workers: separate state (template caches), one bucket. The bucket
    # does not exist yet: the first worker creates it at startup.
    w1 = daemon_factory(env)
    w2 = daemon_factory(dict(env, SANDBOX_TEMPLATE_CACHE_MAX_BYTES="0",
                             SANDBOX_MAINTENANCE_INTERVAL_SECONDS="1"))
    for w in (w1, w2):
        assert w.client().get("/api/v1/admin/overview").body["templates_shared"] is True
    name = "shared-" + uuid.uuid4().hex[:8]
    builder = ready(w1.client(), "bld")
    sh(builder, f"mkdir -p /envs/{name} && echo 'from worker one' > /envs/{name}/hello.txt")
    r = builder.c.post(f"{builder.path}/templates",
                       json={"generation": builder.generation, "name": name,
                             "source_path": f"/envs/{name}"})
    assert r.status == 200, r
    digest = r.body["digest"]

    # The catalog is shared: the second worker lists it.
    s3_control(s3, "POST", "/__s3test/reset")
    listed = w2.client().get("/api/v1/templates").body["templates"]
    assert [t["digest"] for t in listed if t["name"] == name] == [digest], listed
    # Reading it wrote nothing back: a read that uploaded the copy it had
    # just read would undo another replica's publish landing in between.
    assert w2.client().get("/api/v1/admin/overview").body["template_total"] >= 1
    seen = json.loads(s3_control(s3, "GET", "/__s3test/log"))
    assert [e for e in seen if e["method"] == "PUT"] == [], seen
    assert any(e["method"] == "GET" and e["path"].endswith("catalog.json") for e in seen), seen
    # And materialises it from the store (its cache is empty).
    user = ready(w2.client(), "use")
    r = user.c.put(f"{user.path}/templates",
                   json={"generation": user.generation, "templates": [f"{name}@{digest}"]})
    assert r.status == 200, r
    local = Path(r.body["templates"][0]["local_path"])
    assert str(local).startswith(str(w2.state)), local
    assert sh(user, f"cat /envs/{name}/hello.txt")["stdout"] == "from worker one\n"

    # Cache budget 0 on worker two: a revision mounted by a live sandbox is
    # never evicted...
    time.sleep(2.5)
    assert local.is_dir(), "an attached revision was evicted"
    assert user.release().status == 200
    # ...an unused one is, and the next attach fetches it from the store again.
    deadline = time.monotonic() + 10
    while local.is_dir() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not local.is_dir(), "the unused revision outlived the cache budget"
    again = ready(w2.client(), "again")
    r = again.c.put(f"{again.path}/templates",
                    json={"generation": again.generation, "templates": [name]})
    assert r.status == 200, r
    assert sh(again, f"cat /envs/{name}/hello.txt")["stdout"] == "from worker one\n"
    # Unpublished on worker one: worker two refuses new attaches.
    assert w1.client().delete(f"/api/v1/templates/{name}").body["status"] == "REMOVED"
    r = again.c.put(f"{again.path}/templates",
                    json={"generation": again.generation, "templates": [name]})
    assert r.status == 400 and f"template '{name}' is not in the catalog" in r.raw.decode(), r
    for sb in (builder, again):
        assert sb.release().status == 200


def test_store_down_answers_object_store_unavailable(daemon_factory):
    # Nothing listens on this port: startup goes on, template calls say why.
    env = store_env("http://127.0.0.1:9", "nowhere")
    d = daemon_factory(env)
    r = d.client().get("/api/v1/templates")
    assert r.status == 503 and "OBJECT_STORE_UNAVAILABLE" in r.raw.decode(), r
