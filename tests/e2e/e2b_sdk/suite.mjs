// E2B's official JavaScript SDKs, unmodified, against Sandloom
// (tests/e2e/test_e2b_sdk.py runs this and asserts on what it prints).
//
// Usage: node suite.mjs <sdk> <scenario>...   (sdk: "e2b" or "e2b-old")
// Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (tenant A),
// OTHER_KEY (tenant B). Prints one JSON object: {scenario: facts} where
// facts are what the SDK returned or raised, for Python to check. A
// scenario that throws records {"thrown": {name, message}}.

const [sdkName, ...wanted] = process.argv.slice(2)
const { Sandbox } = await import(sdkName)
const codeInterpreter = sdkName === 'e2b' ? await import('@e2b/code-interpreter') : null

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
// Waits for what a slow machine (a sanitizer build, a loaded CI) may take
// a while to show, instead of a fixed sleep; the caller asserts on it.
async function until(predicate, ms = 15_000) {
  const end = Date.now() + ms
  while (!predicate() && Date.now() < end) await sleep(50)
}
const errorFacts = (e) => ({
  name: e?.constructor?.name ?? typeof e,
  message: String(e?.message ?? e),
  exitCode: e?.exitCode,
  stdout: e?.stdout,
  stderr: e?.stderr,
})
const made = []
async function create(opts) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, ...opts })
  made.push(sbx)
  return sbx
}

const scenarios = {
  // The JS quickstart: a sandbox, a command, files.
  async quickstart() {
    const sbx = await create()
    const run = await sbx.commands.run('echo hello from $(pwd); echo oops >&2; id -u')
    await sbx.files.write('/home/user/notes.txt', 'first line\n')
    await sbx.files.write('rel.txt', 'relative')
    const read = await sbx.files.read('/home/user/notes.txt')
    const readRel = await sbx.files.read('/home/user/rel.txt')
    const bytes = await sbx.files.read('notes.txt', { format: 'bytes' })
    const list = (await sbx.files.list('/home/user')).map((e) => [e.name, e.type, e.path]).sort()
    const existsYes = await sbx.files.exists('notes.txt')
    const existsNo = await sbx.files.exists('missing.txt')
    const mk = await sbx.files.makeDir('/home/user/dir/sub')
    const mkAgain = await sbx.files.makeDir('/home/user/dir/sub')
    const renamed = await sbx.files.rename('/home/user/notes.txt', '/home/user/dir/moved.txt')
    const info = await sbx.files.getInfo('/home/user/dir/moved.txt')
    const deep = (await sbx.files.list('/home/user', { depth: 3 })).map((e) => e.path).sort()
    let gz = null
    if (sdkName === 'e2b') {
      // envd 0.5.7's compressed upload (octet-stream, Content-Encoding: gzip).
      await sbx.files.write('/home/user/gz.txt', 'zipped '.repeat(1000), { gzip: true })
      gz = (await sbx.files.read('gz.txt')).length
      await sbx.files.remove('gz.txt')
    }
    const seenByShell = await sbx.commands.run('cat dir/moved.txt; ls /workspace/dir')
    await sbx.files.remove('/home/user/dir')
    const gone = await sbx.files.exists('/home/user/dir')
    let readMissing
    try {
      await sbx.files.read('nope.txt')
    } catch (e) {
      readMissing = errorFacts(e)
    }
    let outside
    try {
      await sbx.files.write('/etc/passwd', 'x')
    } catch (e) {
      outside = errorFacts(e)
    }
    return {
      id: sbx.sandboxId,
      run: { stdout: run.stdout, stderr: run.stderr, exitCode: run.exitCode },
      read, readRel, bytesLength: bytes.length, list, existsYes, existsNo, mk, mkAgain,
      renamed: { name: renamed.name, path: renamed.path, type: renamed.type },
      info: { size: info.size, type: info.type, permissions: info.permissions, owner: info.owner,
              modified: info.modifiedTime instanceof Date && !isNaN(info.modifiedTime) },
      deep, seenByShell: seenByShell.stdout, gone, readMissing, outside, gz,
    }
  },

  // A background command's output arrives as it is made, not at its end.
  async background() {
    const sbx = await create()
    const t0 = Date.now()
    const chunks = []
    const handle = await sbx.commands.run(
      'for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.4; done',
      {
        background: true,
        onStdout: (d) => chunks.push(['stdout', d, Date.now() - t0]),
        onStderr: (d) => chunks.push(['stderr', d, Date.now() - t0]),
      })
    const result = await handle.wait()
    return { pid: handle.pid, chunks, elapsed: Date.now() - t0, stdout: result.stdout,
             stderr: result.stderr, exitCode: result.exitCode }
  },

  // Listed while it runs, reconnected to with its output replayed, killed;
  // wait() then raises.
  async processes() {
    const sbx = await create()
    let started = ''
    const handle = await sbx.commands.run('echo started; sleep 60', { background: true, onStdout: (d) => { started += d } })
    await until(() => started.includes('started'))
    const listed = (await sbx.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args }))
    const replay = []
    const again = await sbx.commands.connect(handle.pid, { onStdout: (d) => replay.push(d) })
    await until(() => replay.join('').includes('started'))
    const killed = await sbx.commands.kill(handle.pid)
    let waited
    try {
      await handle.wait()
    } catch (e) {
      waited = errorFacts(e)
    }
    // Once it has ended (its record written), there is nothing to kill.
    const killedAgain = await sbx.commands.kill(handle.pid)
    let reconnectWaited
    try {
      await again.wait()
    } catch (e) {
      reconnectWaited = errorFacts(e)
    }
    const after = await sbx.commands.list()
    let failed
    try {
      await sbx.commands.run('echo partial; exit 3')
    } catch (e) {
      failed = errorFacts(e)
    }
    return { pid: handle.pid, listed, replay: replay.join(''), killed, killedAgain, waited,
             reconnectWaited, after: after.length, failed }
  },

  // stdin: written while the command runs, then closed.
  async stdin() {
    const sbx = await create()
    const handle = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
    await sbx.commands.sendStdin(handle.pid, 'hello ')
    await sbx.commands.sendStdin(handle.pid, 'stdin\n')
    await sbx.commands.closeStdin(handle.pid)
    const result = await handle.wait()
    return { stdout: result.stdout }
  },

  // The sandbox's envVars reach every command; a command's own win.
  async environment() {
    const sbx = await create({ envs: { GREETING: 'from-create', OTHER: 'kept' } })
    const a = await sbx.commands.run('echo $GREETING $OTHER')
    const b = await sbx.commands.run('echo $GREETING $OTHER', { envs: { GREETING: 'from-run' } })
    const cwd = await sbx.commands.run('pwd', { cwd: '/tmp' })
    const root = await sbx.commands.run('id -u', { user: 'root' })
    let stranger
    try {
      await sbx.commands.run('id -u', { user: 'alice' })
    } catch (e) {
      stranger = errorFacts(e)
    }
    return { a: a.stdout, b: b.stdout, cwd: cwd.stdout, root: root.stdout, stranger }
  },

  // list, getInfo, setTimeout, pause, connect (resume), kill.
  async lifecycle() {
    const sbx = await create({ metadata: { suite: 'lifecycle', run: String(process.pid) } })
    await sbx.files.write('kept.txt', 'survives a pause')
    const info = await sbx.getInfo()
    await sbx.setTimeout(300_000)
    const later = await sbx.getInfo()
    const listed = await Sandbox.list({ query: { metadata: { run: String(process.pid) } } }).nextItems()
    // 2.7 names it betaPause.
    const pause = () => (sbx.pause ?? sbx.betaPause).call(sbx)
    const paused = await pause()
    let pausedAgain
    try {
      pausedAgain = await pause()
    } catch (e) {
      pausedAgain = errorFacts(e)
    }
    const whilePaused = await Sandbox.getInfo(sbx.sandboxId)
    const listedPaused = await Sandbox.list({ query: { state: ['paused'], metadata: { run: String(process.pid) } } }).nextItems()
    const resumed = await Sandbox.connect(sbx.sandboxId)
    const afterResume = await resumed.getInfo()
    const file = await resumed.files.read('kept.txt')
    const run = await resumed.commands.run('echo awake')
    const killed = (await resumed.kill()) ?? null // 2.7 answers nothing
    const killedAgain = await Sandbox.kill(sbx.sandboxId)
    let infoAfterKill
    try {
      await Sandbox.getInfo(sbx.sandboxId)
    } catch (e) {
      infoAfterKill = errorFacts(e)
    }
    return {
      id: sbx.sandboxId,
      info: { state: info.state, templateId: info.templateId, metadata: info.metadata,
              startedAt: info.startedAt.toISOString(), endAt: info.endAt.toISOString() },
      laterEnd: later.endAt.toISOString(),
      listed: listed.map((s) => [s.sandboxId, s.state]),
      paused, pausedAgain, whilePaused: whilePaused.state,
      listedPaused: listedPaused.map((s) => [s.sandboxId, s.state]),
      afterResume: afterResume.state, file, run: run.stdout, killed, killedAgain, infoAfterKill,
    }
  },

  // Metrics: what the sandbox's cgroups count, sampled now.
  async metrics() {
    const sbx = await create()
    await sbx.files.write('big.bin', new Uint8Array(2 * 1024 * 1024).fill(7))
    await sbx.commands.run('timeout 6 sh -c "while :; do :; done"', { background: true })
    await sleep(1000)
    const first = await sbx.getMetrics()
    await sleep(1000)
    const second = await sbx.getMetrics()
    const pick = (m) => ({ cpuCount: m.cpuCount, cpuUsedPct: m.cpuUsedPct, memUsed: m.memUsed,
                           memTotal: m.memTotal, diskUsed: m.diskUsed,
                           timestamp: m.timestamp instanceof Date && !isNaN(m.timestamp) })
    return { first: first.map(pick), second: second.map(pick) }
  },

  // Pages of a listing follow x-next-token.
  async paging() {
    const tag = `paging-${process.pid}`
    for (let i = 0; i < 3; i++) await create({ metadata: { tag } })
    const paginator = Sandbox.list({ query: { metadata: { tag } }, limit: 2 })
    const first = await paginator.nextItems()
    const hasNextAfterFirst = paginator.hasNext
    const second = await paginator.nextItems()
    return { first: first.length, hasNextAfterFirst, second: second.length,
             hasNextAfterSecond: paginator.hasNext,
             distinct: new Set([...first, ...second].map((s) => s.sandboxId)).size }
  },

  // A sandbox past its timeout is killed by the service.
  async lifetime() {
    const sbx = await Sandbox.create({ timeoutMs: 2_000 })
    const before = await sbx.isRunning()
    await sleep(4_500)
    let info
    try {
      await Sandbox.getInfo(sbx.sandboxId)
    } catch (e) {
      info = errorFacts(e)
    }
    const killed = await Sandbox.kill(sbx.sandboxId)
    const paused = await Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'pause' } })
    made.push(paused)
    await sleep(4_500)
    const pausedInfo = await Sandbox.getInfo(paused.sandboxId)
    return { before, info, killed, pausedState: pausedInfo.state }
  },

  // Another tenant's key sees nothing of this tenant's sandbox, and this
  // sandbox's envd token opens no other sandbox.
  async tenants() {
    const mine = await create()
    const theirs = await Sandbox.create({ apiKey: process.env.OTHER_KEY, timeoutMs: 120_000 })
    made.push(theirs)
    let info
    try {
      await Sandbox.getInfo(mine.sandboxId, { apiKey: process.env.OTHER_KEY })
    } catch (e) {
      info = errorFacts(e)
    }
    const killed = await Sandbox.kill(mine.sandboxId, { apiKey: process.env.OTHER_KEY })
    let connect
    try {
      await Sandbox.connect(mine.sandboxId, { apiKey: process.env.OTHER_KEY })
    } catch (e) {
      connect = errorFacts(e)
    }
    const listed = (await Sandbox.list({ apiKey: process.env.OTHER_KEY }).nextItems()).map((s) => s.sandboxId)
    // Their sandbox's envd with my token: refused.
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/health`, {
      headers: { 'E2b-Sandbox-Id': theirs.sandboxId, 'X-Access-Token': mine.envdAccessToken ?? '' },
    })
    const stillRuns = await mine.commands.run('echo mine')
    return { info, killed, connect, listed, mine: mine.sandboxId, theirs: theirs.sandboxId,
             crossToken: res.status, stillRuns: stillRuns.stdout }
  },

  // A terminal: its output, input, a resize reaching the shell.
  async pty() {
    const sbx = await create()
    const decoder = new TextDecoder()
    let screen = ''
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { screen += decoder.decode(d) } })
    const enc = (t) => new TextEncoder().encode(t)
    await sbx.pty.sendInput(term.pid, enc('echo TERM=$TERM; stty size\n'))
    await until(() => screen.includes('24 80'))
    await sbx.pty.resize(term.pid, { cols: 132, rows: 40 })
    await sbx.pty.sendInput(term.pid, enc('stty size; tty\n'))
    await until(() => screen.includes('/dev/pts/'))
    const listed = (await sbx.commands.list()).map((p) => p.pid)
    await sbx.pty.sendInput(term.pid, enc('exit 7\n'))
    let waited
    try {
      waited = await term.wait()
    } catch (e) {
      waited = errorFacts(e)
    }
    return { pid: term.pid, screen, listed, waited }
  },

  // watchDir: events as the directory changes, recursively.
  async watch() {
    const sbx = await create()
    await sbx.files.makeDir('/home/user/w')
    const events = []
    let exited = 'no'
    const handle = await sbx.files.watchDir('/home/user/w', (e) => events.push([e.type, e.name]),
      { recursive: true, onExit: (err) => { exited = err ? String(err) : 'clean' } })
    const seen = (type, name) => events.some(([t, n]) => t === type && n === name)
    await sbx.files.write('/home/user/w/a.txt', 'one')
    await sbx.files.makeDir('/home/user/w/sub')
    await until(() => seen('create', 'sub')) // the new directory is watched from here
    await sbx.files.write('/home/user/w/sub/b.txt', 'two')
    await until(() => seen('create', 'sub/b.txt'))
    await sbx.commands.run('mv /home/user/w/a.txt /home/user/w/c.txt; rm /home/user/w/sub/b.txt')
    await until(() => seen('remove', 'sub/b.txt'))
    await handle.stop()
    return { events, exited }
  },

  // The code interpreter quickstart: state between runs, rich results,
  // errors with their traceback, contexts of their own.
  async interpreter() {
    const { Sandbox: CodeSandbox } = codeInterpreter
    const sbx = await CodeSandbox.create({ timeoutMs: 120_000 })
    made.push(sbx)
    const first = await sbx.runCode('x = 1')
    const second = await sbx.runCode('x += 1; x')
    const streamed = []
    const printed = await sbx.runCode('import sys, os\nprint("to stdout")\nprint("to stderr", file=sys.stderr)\nos.system("echo from a child")', {
      onStdout: (m) => streamed.push(['out', m.line]), onStderr: (m) => streamed.push(['err', m.line]),
    })
    const failed = await sbx.runCode('def f():\n    return 1 / 0\nf()')
    const env = await sbx.runCode('import os; os.environ.get("ONLY_HERE")', { envs: { ONLY_HERE: 'yes' } })
    const envAfter = await sbx.runCode('os.environ.get("ONLY_HERE")')
    const html = await sbx.runCode('class H:\n    def _repr_html_(self): return "<b>hi</b>"\nH()')
    const plot = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("t")\nNone')
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    const inCtx = await sbx.runCode('import os; y = 7; os.getcwd()', { context: ctx })
    const defaultHasNoY = await sbx.runCode('y')
    const contexts = (await sbx.listCodeContexts()).map((c) => c.id).sort()
    await sbx.restartCodeContext(ctx)
    const afterRestart = await sbx.runCode('y', { context: ctx })
    await sbx.removeCodeContext(ctx)
    const contextsAfter = (await sbx.listCodeContexts()).map((c) => c.id)
    // A cell whose client went away goes on; the next run gets only its own.
    let abandoned
    try {
      await sbx.runCode('import time\nfor i in range(4):\n    print("old", i)\n    time.sleep(0.3)', { timeoutMs: 400 })
    } catch (e) {
      abandoned = errorFacts(e)
    }
    const fresh = await sbx.runCode('print("fresh")\n"x"')
    // The files a run writes are the sandbox's.
    await sbx.runCode('open("from_code.txt", "w").write("written by python")')
    const file = await sbx.files.read('from_code.txt')
    return {
      first: { results: first.results.length, error: first.error ?? null },
      second: second.text,
      printed: printed.logs, streamed,
      failed: failed.error ? { name: failed.error.name, value: failed.error.value, traceback: failed.error.traceback } : null,
      env: env.text, envAfter: envAfter.text ?? null,
      html: html.results.map((r) => ({ html: r.html, text: r.text, main: r.isMainResult })),
      plot: plot.results.map((r) => ({ png: r.png ? r.png.slice(0, 12) : null, formats: r.formats() })),
      plotError: plot.error ? plot.error.value : null,
      ctx: { id: ctx.id, cwd: ctx.cwd, language: ctx.language }, inCtx: inCtx.text,
      defaultHasNoY: defaultHasNoY.error?.name, contexts, ctxId: ctx.id,
      afterRestart: afterRestart.error?.name, contextsAfter, file,
      abandoned: abandoned?.name ?? null, fresh: { stdout: fresh.logs.stdout, text: fresh.text,
        results: fresh.results.map((r) => Object.keys(r.extra ?? {})) },
    }
  },

  // A tenant's commands_in_flight counts E2B processes too.
  async quota() {
    const sbx = await Sandbox.create({ apiKey: process.env.QUOTA_KEY, timeoutMs: 120_000 })
    made.push(sbx)
    const handle = await sbx.commands.run('sleep 30', { background: true })
    let second
    try {
      await sbx.commands.run('true')
    } catch (e) {
      second = errorFacts(e)
    }
    await handle.kill()
    try {
      await handle.wait() // ended and recorded: no longer in flight
    } catch {
      // killed: its wait raises, as expected
    }
    const after = await sbx.commands.run('echo room again')
    return { second, after: after.stdout }
  },

  // What this service does not do answers clearly.
  async unsupported() {
    const facts = {}
    try {
      await Sandbox.create({ volumeMounts: { '/data': 'vol' } })
    } catch (e) {
      facts.volumes = errorFacts(e)
    }
    const sbx = await create()
    try {
      await sbx.createSnapshot()
    } catch (e) {
      facts.snapshot = errorFacts(e)
    }
    try {
      await sbx.pause({ keepMemory: true })
    } catch (e) {
      facts.memoryPause = errorFacts(e)
    }
    return facts
  },
}

const results = {}
for (const name of wanted) {
  try {
    results[name] = await scenarios[name]()
  } catch (e) {
    results[name] = { thrown: errorFacts(e) }
  }
}
for (const sbx of made) {
  try {
    await Sandbox.kill(sbx.sandboxId, sbx.connectionConfig?.apiKey ? { apiKey: sbx.connectionConfig.apiKey } : undefined)
  } catch {
    // best effort: the daemon goes at the end of the module anyway
  }
}
console.log(JSON.stringify(results))
