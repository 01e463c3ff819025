"""Templates and tenants (issue 14, item 2): a tenant's templates are
private to it, the operator's (published with the internal token) public to
all. A tenant names its own plainly; another tenant's are not there to
list, attach or remove; attaching a name takes the tenant's own first,
then a public one; every sandbox mounts at /envs/<name> either way."""

import uuid

import pytest

from sandloom_client import Client, Sandbox, assert_bad_arg

ADMIN = "/api/v1/admin/tenants"
TEMPLATES = "/api/v1/templates"


def tenant(client):
    tid = "tt-" + uuid.uuid4().hex[:8]
    assert client.post(ADMIN, json={"tenant_id": tid}).status == 201
    key = client.post(f"{ADMIN}/{tid}/keys", json={"name": "tpl"}).body["api_key"]
    return tid, Client(client.host, client.port, key)


def ready(c, prefix):
    sb = Sandbox(c, f"{prefix}-" + uuid.uuid4().hex[:8], "s")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def sh(sb, script):
    r = sb.exec(["sh", "-c", script])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    return r.body["stdout"]


def build(sb, name, text):
    """Publish /envs/<name> of sb holding one file, hello.txt = text."""
    sh(sb, f"mkdir -p /envs/{name} && printf '{text}' > /envs/{name}/hello.txt")
    return sb.c.post(f"{sb.path}/templates", json={"generation": sb.generation, "name": name,
                                                  "source_path": f"/envs/{name}"})


def attach(sb, *refs):
    return sb.c.put(f"{sb.path}/templates",
                    json={"generation": sb.generation, "templates": list(refs)})


def names(c):
    r = c.get(TEMPLATES)
    assert r.status == 200, r
    return {t["name"]: t for t in r.body["templates"]}


@pytest.fixture(scope="module")
def world(client):
    (ta, a), (tb, b) = tenant(client), tenant(client)
    return {"client": client, "ta": ta, "a": a, "tb": tb, "b": b}


def test_a_tenants_template_is_its_own(world, daemon):
    client, ta, a, b = world["client"], world["ta"], world["a"], world["b"]
    name = "own-" + uuid.uuid4().hex[:6]
    builder = ready(a, "abld")
    r = build(builder, name, "from a")
    assert r.status == 200, r
    # Its own name, its own sandbox, private, no host path.
    assert r.body["name"] == name and r.body["mount_target"] == f"/envs/{name}", r.body
    assert r.body["source_sandbox_id"] == builder.id and r.body["visibility"] == "private"
    assert "local_path" not in r.body
    assert names(a)[name]["visibility"] == "private"
    # Another tenant neither lists, attaches nor removes it.
    assert name not in names(b)
    other = ready(b, "bsb")
    assert_bad_arg(attach(other, name), f"template '{name}' is not in the catalog")
    gone = b.delete(f"{TEMPLATES}/{name}")
    assert gone.status == 200 and gone.body == {"status": "NOT_FOUND", "name": name}, gone
    assert name in names(a)
    # The operator sees it stored in the tenant's namespace, with its owner.
    op = names(client)[f"{ta}~{name}"]
    assert op["visibility"] == "private" and op["tenant_id"] == ta, op
    assert op["mount_target"] == f"/envs/{name}"
    assert name not in names(client)  # no public template of that name
    # Its sandboxes mount it at /envs/<name>.
    user = ready(a, "ause")
    r = attach(user, name)
    assert r.status == 200 and [t["name"] for t in r.body["templates"]] == [name], r
    assert "local_path" not in r.body["templates"][0]
    assert sh(user, f"cat /envs/{name}/hello.txt") == "from a"
    # ...and it removes it, by its name.
    r = a.delete(f"{TEMPLATES}/{name}")
    assert r.body == {"status": "REMOVED", "name": name}, r
    assert name not in names(a) and f"{ta}~{name}" not in names(client)


def test_public_templates_reach_every_tenant_and_a_tenants_own_comes_first(world):
    client, a, b = world["client"], world["a"], world["b"]
    name = "pub-" + uuid.uuid4().hex[:6]
    ops = ready(client, "obld")
    r = build(ops, name, "public")
    assert r.status == 200 and r.body["visibility"] == "public", r
    for c in (a, b):
        assert names(c)[name]["visibility"] == "public"
    # Tenant A publishes its own of the same name: A attaches its own, B the public one.
    assert build(ready(a, "abld"), name, "a-own").status == 200
    ua, ub = ready(a, "ua"), ready(b, "ub")
    assert attach(ua, name).status == 200 and attach(ub, name).status == 200
    assert sh(ua, f"cat /envs/{name}/hello.txt") == "a-own"
    assert sh(ub, f"cat /envs/{name}/hello.txt") == "public"
    listed = names(a)[name]
    assert listed["visibility"] == "private", listed  # its own shadows the public one
    # A tenant cannot remove a public template: its DELETE is of its own.
    assert a.delete(f"{TEMPLATES}/{name}").body["status"] == "REMOVED"
    assert a.delete(f"{TEMPLATES}/{name}").body["status"] == "NOT_FOUND"
    assert names(a)[name]["visibility"] == "public"
    assert client.delete(f"{TEMPLATES}/{name}").body["status"] == "REMOVED"


def test_a_tenant_cannot_name_a_stored_template(world):
    """Names with the namespace separator, or another tenant's stored name,
    are refused as names, never looked up."""
    a, tb = world["a"], world["tb"]
    sb = ready(a, "bad")
    for bad in (f"{tb}~x", "a~b"):
        assert_bad_arg(attach(sb, bad), prefix="invalid template name")
        assert_bad_arg(a.delete(f"{TEMPLATES}/{bad}"), prefix="invalid template name")
        r = a.post(f"{sb.path}/templates", json={"generation": sb.generation, "name": bad})
        assert r.status == 422, r
