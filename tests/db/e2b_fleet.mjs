// E2B's JavaScript SDK, unmodified, against one replica of a fleet that does
// not hold the sandbox (tests/db/test_e2b_fleet.py runs this and asserts on
// what it prints).
//
// Usage: node e2b_fleet.mjs <sandbox id>
// Environment: E2B_API_URL and E2B_SANDBOX_URL (the replica), E2B_API_KEY.
// Prints one JSON object of what the SDK returned; a step that throws
// records {"thrown": {name, message}} under its name and the rest go on.

import { Sandbox } from 'e2b'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'

const [id] = process.argv.slice(2)
const out = {}
async function step(name, fn) {
  try {
    out[name] = await fn()
  } catch (e) {
    out[name] = { thrown: { name: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) } }
  }
}

const sbx = await Sandbox.connect(id)
await step('run', async () => {
  const r = await sbx.commands.run('echo hello from $(pwd); echo oops >&2')
  return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode }
})
await step('files', async () => {
  await sbx.files.write('/home/user/fleet.txt', 'written through the other replica\n')
  return {
    read: await sbx.files.read('/home/user/fleet.txt'),
    list: (await sbx.files.list('/home/user')).map((e) => e.name).sort(),
  }
})
await step('background', async () => {
  // A Connect server-stream relayed as it comes: each line arrives before
  // the command ends.
  const t0 = Date.now()
  const chunks = []
  const handle = await sbx.commands.run('for i in 1 2 3; do echo out$i; sleep 0.4; done', {
    background: true,
    onStdout: (d) => chunks.push([d, Date.now() - t0]),
  })
  const result = await handle.wait()
  return { chunks, elapsed: Date.now() - t0, stdout: result.stdout, exitCode: result.exitCode }
})
await step('runCode', async () => {
  const ci = await CodeSandbox.connect(id)
  const printed = []
  await ci.runCode('x = 40', {})
  const r = await ci.runCode('print("streamed")\nx + 2', { onStdout: (m) => printed.push(m.line) })
  return { text: r.text, stdout: r.logs.stdout, printed, error: r.error ?? null }
})
await step('info', async () => {
  const info = await Sandbox.getInfo(id)
  return { sandboxId: info.sandboxId, state: info.state }
})
await step('metrics', async () => {
  const m = await sbx.getMetrics()
  return { samples: m.length, diskUsed: m[0]?.diskUsed ?? 0 }
})
await step('kill', async () => await Sandbox.kill(id))
await step('afterKill', async () => await Sandbox.kill(id))
console.log(JSON.stringify(out))
