// The E2B SDK's figures (bench/e2b_bench.py runs this with the pinned SDK):
//   1. Sandbox.create() to the first commands.run('true') result, per
//      sandbox, over N sandboxes (each killed after, untimed), alternating
//      with the same through the native routes;
//   2. commands.run('true') round trips on one sandbox beside the native
//      exec route (POST /api/v1/sandboxes/{id}/exec, the same daemon, the
//      same client process, keep-alive fetch), alternating.
// Each create comes after a pause of gapMs (untimed): sandboxes are created
// one at a time, as an agent would, not back to back. rounds 0: the create
// figures only.
// Prints one JSON object of milliseconds; asserts nothing.
import { Sandbox } from 'e2b'

const [n, rounds, gapMs] = process.argv.slice(2).map(Number)
const pause = (t) => new Promise((resolve) => setTimeout(resolve, t))
const api = process.env.E2B_API_URL
const token = process.env.BENCH_TOKEN
const ms = () => Number(process.hrtime.bigint()) / 1e6

const auth = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }
const post = async (path, body) => {
  const res = await fetch(`${api}${path}`, { method: 'POST', headers: auth,
    body: JSON.stringify(body) })
  const doc = await res.json()
  if (!res.ok) throw new Error(`${path}: ${JSON.stringify(doc)}`)
  return doc
}
const login = ['/bin/bash', '-l', '-c', 'true']

// Alternating: the SDK's create and first run, then the same through the
// native routes (resolve, connect, exec of the argv the SDK sends), so the
// second says what the service itself costs and the rest is the SDK's.
const createToFirst = [], nativeCreateToFirst = []
for (let i = 0; i < n; i++) {
  await pause(gapMs)
  let t0 = ms()
  const sbx = await Sandbox.create()
  const r = await sbx.commands.run('true')
  createToFirst.push(ms() - t0)
  if (r.exitCode !== 0) throw new Error('true failed')
  await sbx.kill()
  await pause(gapMs)
  const nid = 'first-' + Math.random().toString(16).slice(2, 10)
  t0 = ms()
  const { generation: g } = await post('/api/v1/sandboxes/resolve',
    { sandbox_id: nid, workspace_scope_id: nid })
  await post(`/api/v1/sandboxes/${nid}`, { generation: g })
  const ran = await post(`/api/v1/sandboxes/${nid}/exec`,
    { exec_id: 'first', generation: g, argv: login })
  nativeCreateToFirst.push(ms() - t0)
  if (ran.status !== 'SUCCEEDED') throw new Error(JSON.stringify(ran))
  await fetch(`${api}/api/v1/sandboxes/${nid}`, { method: 'DELETE', headers: auth })
}

if (rounds === 0) {
  console.log(JSON.stringify({ createToFirst, nativeCreateToFirst }))
  process.exit(0)
}

// Round trips: one E2B sandbox, one native sandbox, warmed once each.
const sbx = await Sandbox.create()
await sbx.commands.run('true')
const id = 'bench-' + Math.random().toString(16).slice(2, 10)
let r = await fetch(`${api}/api/v1/sandboxes/resolve`, { method: 'POST', headers: auth,
  body: JSON.stringify({ sandbox_id: id, workspace_scope_id: id }) })
const { generation } = await r.json()
await fetch(`${api}/api/v1/sandboxes/${id}`, { method: 'POST', headers: auth,
  body: JSON.stringify({ generation }) })
let seq = 0
// The SDK runs `/bin/bash -l -c <cmd>`: the native route runs the same
// (the protocol's cost), and plain `true` (what a native client would).
const native = async (argv) => {
  const res = await fetch(`${api}/api/v1/sandboxes/${id}/exec`, { method: 'POST', headers: auth,
    body: JSON.stringify({ exec_id: `bench-${seq++}`, generation, argv }) })
  const body = await res.json()
  if (body.status !== 'SUCCEEDED') throw new Error(JSON.stringify(body))
}
await native(login)
const e2b = [], nat = [], bare = []
for (let i = 0; i < rounds; i++) {
  let t0 = ms()
  await sbx.commands.run('true')
  e2b.push(ms() - t0)
  t0 = ms()
  await native(login)
  nat.push(ms() - t0)
  t0 = ms()
  await native(['true'])
  bare.push(ms() - t0)
}
await sbx.kill()
await fetch(`${api}/api/v1/sandboxes/${id}`, { method: 'DELETE', headers: auth })
console.log(JSON.stringify({ createToFirst, nativeCreateToFirst, e2b, native: nat, bare }))
