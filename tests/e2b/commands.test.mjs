// envd's process.Process through the official SDK (`sandbox.commands`, `sandbox.pty`):
// what E2B users run, against cela's Connect codec and its execs. docs/e2b.md, "Data
// plane: Connect and processes".
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, TimeoutError } from 'e2b'
import { sleep, until } from './wait.mjs'

const SANDBOX_URL = process.env.E2B_SANDBOX_URL
const CELA_URL = process.env.CELA_URL
const CELA_KEY = process.env.CELA_KEY

const opened = []
async function sandbox() {
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  opened.push(sbx)
  return sbx
}
after(async () => {
  for (const sbx of opened) await sbx.kill().catch(() => {})
})

// A Connect call made by hand: the bytes on the wire, not the SDK's view of them.
function envdFetch(path, { sandboxId, token, body = '{}', headers = {} }) {
  return fetch(`${SANDBOX_URL}${path}`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      'Connect-Protocol-Version': '1',
      'E2b-Sandbox-Id': sandboxId,
      ...(token ? { 'X-Access-Token': token } : {}),
      ...headers,
    },
    body,
  })
}

// The session's processes and execs as the native API shows them.
async function nativeProcesses(sessionId) {
  const res = await fetch(`${CELA_URL}/v1/sessions/${sessionId}/processes`, {
    headers: { Authorization: `Bearer ${CELA_KEY}` },
  })
  assert.equal(res.status, 200)
  return (await res.json()).processes
}
async function nativeExec(sessionId, execId) {
  const res = await fetch(`${CELA_URL}/v1/sessions/${sessionId}/execs/${execId}`, {
    headers: { Authorization: `Bearer ${CELA_KEY}` },
  })
  return res.json()
}

test('run: output, exit codes and CommandExitError', async () => {
  const sbx = await sandbox()
  const ok = await sbx.commands.run('echo hello; echo oops >&2')
  assert.equal(ok.exitCode, 0)
  assert.equal(ok.stdout, 'hello\n')
  assert.equal(ok.stderr, 'oops\n')
  assert.equal(ok.error, undefined)

  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, String(err))
    assert.equal(err.exitCode, 3)
    assert.equal(err.error, 'exit status 3')
    assert.equal(err.stdout, 'partial\n')
    return true
  })
  // Binary-safe: bytes that are not UTF-8 text travel as base64.
  const bytes = await sbx.commands.run("printf 'a\\tb\\n'")
  assert.equal(bytes.stdout, 'a\tb\n')
})

test('onStdout / onStderr stream while the command runs', async () => {
  const sbx = await sandbox()
  const seen = []
  const began = Date.now()
  const result = await sbx.commands.run('echo first; sleep 1.5; echo second >&2', {
    onStdout: (d) => seen.push(['out', d, Date.now() - began]),
    onStderr: (d) => seen.push(['err', d, Date.now() - began]),
  })
  assert.equal(result.exitCode, 0)
  assert.deepEqual(
    seen.map(([k, d]) => [k, d]),
    [
      ['out', 'first\n'],
      ['err', 'second\n'],
    ]
  )
  // The first line came while the command still slept, not with its end.
  assert.ok(seen[0][2] < 1200, `first chunk after ${seen[0][2]} ms`)
  assert.ok(seen[1][2] >= 1400)
})

test('envs, cwd and user', async () => {
  const sbx = await sandbox()
  const def = await sbx.commands.run('whoami; pwd; echo "$FOO"', { envs: { FOO: 'bar baz' } })
  assert.equal(def.stdout, 'user\n/home/user\nbar baz\n')
  const root = await sbx.commands.run('whoami; pwd', { user: 'root', cwd: '/tmp' })
  assert.equal(root.stdout, 'root\n/tmp\n')
  await assert.rejects(sbx.commands.run('true', { user: 'nobody-here' }))
})

test('background, list and kill', async () => {
  const sbx = await sandbox()
  const handle = await sbx.commands.run('sleep 60', { background: true })
  assert.ok(handle.pid > 1)
  const listed = await sbx.commands.list()
  const mine = listed.find((p) => p.pid === handle.pid)
  assert.ok(mine, JSON.stringify(listed))
  assert.equal(mine.cmd, '/bin/bash')
  assert.deepEqual(mine.args, ['-l', '-c', 'sleep 60'])

  // The pid is the process's inside the sandbox, and the process is an exec of the
  // session layer: the native API shows the same pid with its exec.
  // (bash -c execs its last command in place: the pid is sleep's now.)
  const ps = await sbx.commands.run(`ps -o comm= -p ${handle.pid}`)
  assert.equal(ps.stdout.trim(), 'sleep')
  const native = await nativeProcesses(sbx.sandboxId)
  const proc = native.find((p) => p.pid === handle.pid)
  assert.ok(proc?.exec_id, JSON.stringify(native))
  assert.equal((await nativeExec(sbx.sandboxId, proc.exec_id)).state, 'running')

  assert.equal(await sbx.commands.kill(handle.pid), true)
  await assert.rejects(handle.wait(), (err) => {
    assert.ok(err instanceof CommandExitError, String(err))
    assert.equal(err.exitCode, -1)
    assert.equal(err.error, 'signal: killed')
    return true
  })
  await until('the killed process to leave the list', async () =>
    !(await sbx.commands.list()).some((p) => p.pid === handle.pid)
  )
  assert.equal(await sbx.commands.kill(handle.pid), false)
  const ended = await nativeExec(sbx.sandboxId, proc.exec_id)
  assert.equal(ended.state, 'killed')
})

test('stdin: sendStdin and closeStdin', async () => {
  const sbx = await sandbox()
  const handle = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
  await sbx.commands.sendStdin(handle.pid, 'hello ')
  await handle.sendStdin('world\n')
  await sbx.commands.closeStdin(handle.pid)
  const result = await handle.wait()
  assert.equal(result.stdout, 'hello world\ndone\n')
  // Without stdin: true the command reads end of file at once.
  const closed = await sbx.commands.run('cat; echo eof')
  assert.equal(closed.stdout, 'eof\n')
})

test('timeoutMs ends the command with a TimeoutError and kills it', async () => {
  const sbx = await sandbox()
  const began = Date.now()
  await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }), (err) => {
    assert.ok(err instanceof TimeoutError, String(err))
    return true
  })
  assert.ok(Date.now() - began < 10_000)
  await until('the timed-out process to be gone', async () => {
    const out = await sbx.commands.run('pgrep -x sleep || true')
    return out.stdout.trim() === ''
  })
})

test('connect to a running command sees its output from then on', async () => {
  const sbx = await sandbox()
  const first = await sbx.commands.run('for i in $(seq 1 40); do echo line$i; sleep 0.1; done', {
    background: true,
  })
  await sleep(800)
  await first.disconnect()
  const chunks = []
  const again = await sbx.commands.connect(first.pid, { onStdout: (d) => chunks.push(d) })
  assert.equal(again.pid, first.pid)
  const result = await again.wait()
  assert.equal(result.exitCode, 0)
  const lines = chunks.join('').trim().split('\n')
  assert.equal(lines.at(-1), 'line40')
  assert.ok(!lines.includes('line1'), 'connect replayed output from before it')
  await assert.rejects(sbx.commands.connect(999_999))
})

test('pty: create, sendInput, resize', async () => {
  const sbx = await sandbox()
  let out = ''
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += new TextDecoder().decode(d)) })
  const enc = new TextEncoder()
  await sbx.pty.sendInput(pty.pid, enc.encode('stty size\n'))
  await until('the first size', async () => out.includes('24 80'))
  await sbx.pty.resize(pty.pid, { cols: 100, rows: 40 })
  await sbx.pty.sendInput(pty.pid, enc.encode('stty size; tty\n'))
  await until('the new size', async () => out.includes('40 100'))
  // `tty` answers after `stty size`: its line may come in a later chunk.
  await until('the tty name', async () => /\/dev\/pts\/\d+/.test(out))
  await sbx.pty.sendInput(pty.pid, enc.encode('exit 0\n'))
  const result = await pty.wait()
  assert.equal(result.exitCode, 0)
})

test('killing the sandbox drops an open stream', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 300_000 })
  const handle = await sbx.commands.run('sleep 120', { background: true })
  const waited = handle.wait().then(
    () => assert.fail('the stream ended normally'),
    (err) => err
  )
  await sleep(300)
  await sbx.kill()
  const err = await waited
  // The SDK sees the connection drop, probes /health (502) and says the sandbox is gone.
  assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message}`)
  assert.match(err.message, /killed|end of life/)
  // Every data-plane route answers E2B's 502 for it now.
  const health = await fetch(`${SANDBOX_URL}/health`, {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken },
  })
  assert.equal(health.status, 502)
  const body = await health.json()
  assert.equal(body.code, 502)
  assert.equal(body.sandboxId, sbx.sandboxId)
  assert.match(body.message, /not found/)
  const list = await envdFetch('/process.Process/List', { sandboxId: sbx.sandboxId, token: sbx.envdAccessToken })
  assert.equal(list.status, 502)
})

test('health, and the token of one sandbox opens no other', async () => {
  const a = await sandbox()
  const b = await sandbox()
  const health = await fetch(`${SANDBOX_URL}/health`, {
    headers: { 'E2b-Sandbox-Id': a.sandboxId, 'X-Access-Token': a.envdAccessToken },
  })
  assert.equal(health.status, 204)

  const own = await envdFetch('/process.Process/List', { sandboxId: a.sandboxId, token: a.envdAccessToken })
  assert.equal(own.status, 200)
  assert.ok(Array.isArray((await own.json()).processes))
  const crossed = await envdFetch('/process.Process/List', { sandboxId: a.sandboxId, token: b.envdAccessToken })
  assert.equal(crossed.status, 401)
  assert.equal((await crossed.json()).code, 'unauthenticated')
  const none = await envdFetch('/process.Process/List', { sandboxId: a.sandboxId })
  assert.equal(none.status, 401)
  // B's token cannot start anything in A either (a stream call).
  const start = await envdFetch('/process.Process/Start', {
    sandboxId: a.sandboxId,
    token: b.envdAccessToken,
    headers: { 'Content-Type': 'application/connect+json' },
    body: envelope({ process: { cmd: '/bin/true' } }),
  })
  assert.equal(start.status, 401)
  // A wrong content type is Connect's error, not a start.
  const badType = await envdFetch('/process.Process/List', {
    sandboxId: a.sandboxId,
    token: a.envdAccessToken,
    headers: { 'Content-Type': 'text/plain' },
  })
  assert.equal(badType.status, 400)
  assert.equal((await badType.json()).code, 'invalid_argument')
})

function envelope(message) {
  const data = Buffer.from(JSON.stringify(message))
  const head = Buffer.alloc(5)
  head.writeUInt8(0, 0)
  head.writeUInt32BE(data.length, 1)
  return Buffer.concat([head, data])
}

test('the wire: Start by hand, envelopes and the end of stream', async () => {
  const sbx = await sandbox()
  const res = await envdFetch('/process.Process/Start', {
    sandboxId: sbx.sandboxId,
    token: sbx.envdAccessToken,
    headers: { 'Content-Type': 'application/connect+json' },
    body: envelope({ process: { cmd: '/bin/sh', args: ['-c', 'echo hi; exit 3'] } }),
  })
  assert.equal(res.status, 200)
  assert.equal(res.headers.get('content-type'), 'application/connect+json')
  const buf = Buffer.from(await res.arrayBuffer())
  const frames = []
  for (let at = 0; at < buf.length; ) {
    const flags = buf.readUInt8(at)
    const len = buf.readUInt32BE(at + 1)
    frames.push({ flags, msg: JSON.parse(buf.subarray(at + 5, at + 5 + len).toString()) })
    at += 5 + len
  }
  assert.ok(frames[0].msg.event.start.pid > 1)
  assert.equal(frames.filter((f) => f.msg.event?.start).length, 1)
  const data = frames.filter((f) => f.msg.event?.data).map((f) => Buffer.from(f.msg.event.data.stdout, 'base64'))
  assert.equal(Buffer.concat(data).toString(), 'hi\n')
  const end = frames.at(-2).msg.event.end
  assert.deepEqual(end, { exitCode: 3, exited: true, status: 'exit status 3', error: 'exit status 3' })
  assert.equal(frames.at(-1).flags, 2)
  assert.deepEqual(frames.at(-1).msg, {})
})

test('open streams do not starve unary calls', async () => {
  const sbx = await sandbox()
  const handles = []
  for (let i = 0; i < 12; i++) handles.push(await sbx.commands.run('sleep 30', { background: true }))
  const began = Date.now()
  const listed = await sbx.commands.list()
  assert.ok(Date.now() - began < 3000, `list took ${Date.now() - began} ms`)
  for (const h of handles) assert.ok(listed.some((p) => p.pid === h.pid))
  const echo = await sbx.commands.run('echo still')
  assert.equal(echo.stdout, 'still\n')
  for (const h of handles) await h.kill()
})
