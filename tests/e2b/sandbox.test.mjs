// E2B's control plane driven by the official SDK (docs/e2b.md "Control plane"): what the
// SDK does is checked against what cela's own API (CELA_URL, CELA_KEY) says happened.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, AuthenticationError, SandboxNotFoundError } from 'e2b'

const CELA_URL = process.env.CELA_URL
const CELA_KEY = process.env.CELA_KEY
const API_URL = process.env.E2B_API_URL
const API_KEY = process.env.E2B_API_KEY

const made = []
async function create(opts = {}) {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, ...opts })
  made.push(sbx.sandboxId)
  return sbx
}
after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
})

// The native API, as the suite's host admin key (tenant `default`, as the e2b key).
async function native(method, path, body, key = CELA_KEY) {
  const res = await fetch(CELA_URL + path, {
    method,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : null }
}
async function run(id, cmd) {
  const r = await native('POST', `/v1/sessions/${id}/run`, { cmd })
  assert.equal(r.status, 200, JSON.stringify(r.body))
  return r.body
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
async function until(what, check, ms = 20_000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await check()
    if (v) return v
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`)
    await sleep(250)
  }
}

test('the suite key is an e2b key and works as Bearer on the native API', async () => {
  assert.match(API_KEY, /^e2b_[0-9a-f]+$/)
  const r = await native('GET', '/v1/sessions', undefined, API_KEY)
  assert.equal(r.status, 200)
})

test('create: metadata and envVars reach the session; getInfo describes it', async () => {
  const before = Date.now()
  const sbx = await create({ metadata: { suite: 'control', n: '1' }, envs: { CTL_FOO: 'bar baz' } })
  assert.match(sbx.sandboxId, /^s-/)
  const session = await native('GET', `/v1/sessions/${sbx.sandboxId}`)
  assert.equal(session.status, 200)
  assert.deepEqual(session.body.metadata, { suite: 'control', n: '1' })
  const out = await run(sbx.sandboxId, 'printf %s "$CTL_FOO"')
  assert.equal(out.stdout, 'bar baz')

  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { suite: 'control', n: '1' })
  assert.equal(info.envdVersion, '0.6.3')
  assert.ok(info.cpuCount >= 1)
  assert.equal(info.memoryMB, session.body.limits.memory_mb)
  assert.ok(info.startedAt.getTime() >= before - 2000 && info.startedAt.getTime() <= Date.now())
  const ttl = info.endAt.getTime() - info.startedAt.getTime()
  assert.ok(Math.abs(ttl - 120_000) < 2000, `endAt - startedAt = ${ttl} ms`)
})

test('setTimeout: the sandbox ends that long from now', async () => {
  const sbx = await create()
  await sbx.setTimeout(2000)
  const info = await sbx.getInfo()
  assert.ok(info.endAt.getTime() - Date.now() < 3000)
  await until('the ttl to end it', async () => {
    const s = await native('GET', `/v1/sessions/${sbx.sandboxId}`)
    return s.body.state === 'terminated' && s.body
  })
  const ended = await native('GET', `/v1/sessions/${sbx.sandboxId}`)
  assert.equal(ended.body.termination.reason, 'ttl_expired')
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
})

test('list: metadata filter and paging (limit 1, then the next page)', async () => {
  const group = `g${Date.now()}`
  const a = await create({ metadata: { group, which: 'a' } })
  const b = await create({ metadata: { group, which: 'b' } })
  await create({ metadata: { group: 'other' } })
  const pages = Sandbox.list({ query: { metadata: { group } }, limit: 1 })
  const first = await pages.nextItems()
  assert.equal(first.length, 1)
  assert.ok(pages.hasNext)
  const second = await pages.nextItems()
  assert.equal(second.length, 1)
  const seen = new Set([...first, ...second].map((s) => s.sandboxId))
  assert.deepEqual(seen, new Set([a.sandboxId, b.sandboxId]))
  if (pages.hasNext) assert.equal((await pages.nextItems()).length, 0)
  assert.equal(pages.hasNext, false)
  for (const s of [...first, ...second]) {
    assert.equal(s.state, 'running')
    assert.equal(s.metadata.group, group)
  }
  // Two pairs must both match; a value with characters the SDK encodes twice.
  const odd = await create({ metadata: { group, 'k&=': 'v a/l%ue+' } })
  const both = await Sandbox.list({ query: { metadata: { group, 'k&=': 'v a/l%ue+' } } }).nextItems()
  assert.deepEqual(both.map((s) => s.sandboxId), [odd.sandboxId])
  const paused = await Sandbox.list({ query: { metadata: { group }, state: ['paused'] } }).nextItems()
  assert.equal(paused.length, 0)
  // Filters cela cannot apply are refused, never silently dropped.
  await assert.rejects(Sandbox.list({ query: { template: 'base' } }).nextItems(), /400/)
  await assert.rejects(Sandbox.list({ order: 'asc' }).nextItems(), /400/)
  assert.ok((await Sandbox.list({ order: 'desc', query: { metadata: { group } } }).nextItems()).length >= 2)
})

test('pause, then connect resumes it with its files', async () => {
  const sbx = await create()
  await run(sbx.sandboxId, 'echo kept > /home/user/marker')
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal((await native('GET', `/v1/sessions/${sbx.sandboxId}`)).body.state, 'paused')
  assert.equal(await sbx.pause(), false)  // 409: already paused

  // The raw answer: 201 when connect resumed it, 200 once it runs.
  const raw = async () =>
    fetch(`${API_URL}/v2/sandboxes/${sbx.sandboxId}/connect`, {
      method: 'POST',
      headers: { 'X-API-KEY': API_KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify({ timeout: 60 }),
    })
  const resumed = await raw()
  assert.equal(resumed.status, 201)
  const body = await resumed.json()
  assert.equal(body.sandboxID, sbx.sandboxId)
  assert.ok(body.envdAccessToken)
  assert.equal((await raw()).status, 200)
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(info.state, 'running')
  assert.ok(Math.abs(info.endAt.getTime() - Date.now() - 60_000) < 3000, 'connect timeout is the TTL from now')

  assert.equal(await sbx.pause(), true)
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal((await again.getInfo()).state, 'running')
  assert.equal((await run(sbx.sandboxId, 'cat /home/user/marker')).stdout, 'kept\n')
})

test('autoPause: the timeout pauses instead of ending, connect resumes', async () => {
  const sbx = await create({ timeoutMs: 2000, lifecycle: { onTimeout: 'pause' } })
  await run(sbx.sandboxId, 'echo before > /home/user/auto')
  assert.equal((await sbx.getInfo()).lifecycle?.onTimeout, 'pause')
  await until('the ttl to pause it', async () => (await Sandbox.getInfo(sbx.sandboxId)).state === 'paused')
  await sleep(1500)
  assert.equal((await native('GET', `/v1/sessions/${sbx.sandboxId}`)).body.state, 'paused')
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
  assert.equal((await run(sbx.sandboxId, 'cat /home/user/auto')).stdout, 'before\n')
})

test('getMetrics: points with the limits of the session', async () => {
  const sbx = await create()
  await run(sbx.sandboxId, 'head -c 20000000 /dev/urandom | sha256sum >/dev/null')
  const metrics = await sbx.getMetrics()
  assert.ok(metrics.length >= 1)
  const session = (await native('GET', `/v1/sessions/${sbx.sandboxId}`)).body
  const last = metrics.at(-1)
  assert.ok(last.timestamp instanceof Date && Math.abs(last.timestamp.getTime() - Date.now()) < 5000)
  assert.equal(last.memTotal, session.limits.memory_mb * 1024 * 1024)
  assert.equal(last.diskTotal, session.limits.disk_mb * 1024 * 1024)
  assert.ok(last.memUsed > 0 && last.memUsed <= last.memTotal)
  assert.ok(metrics.some((m) => m.cpuUsedPct > 0), JSON.stringify(metrics))
  for (const m of metrics) assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100)
})

test('kill: true, then false; the session is deleted', async () => {
  const sbx = await create()
  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  const s = await native('GET', `/v1/sessions/${sbx.sandboxId}`)
  assert.equal(s.body.state, 'terminated')
  assert.equal(s.body.termination.reason, 'deleted')
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
})

test('a wrong or missing key is refused', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'e2b_' + '0'.repeat(64) }), AuthenticationError)
  await assert.rejects(Sandbox.list({ apiKey: 'e2b_1234' }).nextItems(), AuthenticationError)
  const res = await fetch(`${API_URL}/v2/sandboxes`, { method: 'POST', body: '{}' })
  assert.equal(res.status, 401)
  const body = await res.json()
  assert.equal(body.code, 401)
  assert.equal(typeof body.message, 'string')
})

test("another tenant's key neither sees nor touches the sandbox", async () => {
  const sbx = await create({ metadata: { owner: 'default' } })
  const tenant = await native('POST', '/v1/tenants', { name: `other-${Date.now()}` })
  assert.equal(tenant.status, 201)
  const key = await native('POST', `/v1/tenants/${tenant.body.id}/keys`, { e2b: true })
  assert.equal(key.status, 201)
  const apiKey = key.body.key
  assert.match(apiKey, /^e2b_[0-9a-f]+$/)

  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey }), SandboxNotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey }), false)
  await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey }), SandboxNotFoundError)
  await assert.rejects(Sandbox.setTimeout(sbx.sandboxId, 1000, { apiKey }), SandboxNotFoundError)
  await assert.rejects(Sandbox.pause(sbx.sandboxId, { apiKey }), SandboxNotFoundError)
  await assert.rejects(Sandbox.getMetrics(sbx.sandboxId, { apiKey }), SandboxNotFoundError)
  const listed = await Sandbox.list({ apiKey, query: { metadata: { owner: 'default' } } }).nextItems()
  assert.equal(listed.length, 0)

  const info = await sbx.getInfo()
  assert.equal(info.state, 'running')
  assert.ok(info.endAt.getTime() - Date.now() > 60_000, 'the other tenant did not shorten it')
  // Its own sandbox is its own.
  const theirs = await Sandbox.create({ apiKey, timeoutMs: 60_000 })
  assert.equal(await Sandbox.kill(theirs.sandboxId, { apiKey }), true)
})

test('unsupported options are refused, not ignored', async () => {
  const post = (body) =>
    fetch(`${API_URL}/v2/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-KEY': API_KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    })
  for (const body of [
    { templateID: 'base', network: { egressProxy: { address: 'proxy.test:1080' } } },
    { templateID: 'base', network: { rules: { 'api.test': [{ transform: { headers: { a: 'b' } } }] } } },
    { templateID: 'base', mcp: { x: {} } },
    { templateID: 'no-such-template' },
    { templateID: 'base', timeout: 0 },
  ]) {
    const res = await post(body)
    assert.ok(res.status >= 400 && res.status < 500, `${JSON.stringify(body)}: ${res.status}`)
    const err = await res.json()
    assert.equal(err.code, res.status)
  }
})

test("the tenant's quotas apply: past max_sessions the SDK gets its RateLimitError", async () => {
  const tenant = await native('POST', '/v1/tenants', { name: `quota-${Date.now()}`, quotas: { max_sessions: 1 } })
  assert.equal(tenant.status, 201)
  const apiKey = (await native('POST', `/v1/tenants/${tenant.body.id}/keys`, { e2b: true })).body.key
  const one = await Sandbox.create({ apiKey, timeoutMs: 60_000 })
  try {
    await assert.rejects(Sandbox.create({ apiKey, timeoutMs: 60_000 }), (e) => {
      assert.equal(e.name, 'RateLimitError')
      return true
    })
  } finally {
    await Sandbox.kill(one.sandboxId, { apiKey })
  }
})

test('allowInternetAccess opens the egress allowlist; without it the sandbox has no network', async () => {
  const closed = await create()
  assert.equal((await native('GET', `/v1/sessions/${closed.sandboxId}`)).body.network.mode, 'none')
  assert.equal((await closed.getInfo()).allowInternetAccess, false)
  const open = await create({ allowInternetAccess: true })
  const network = (await native('GET', `/v1/sessions/${open.sandboxId}`)).body.network
  assert.equal(network.mode, 'allowlist')
  assert.deepEqual(network.allow, ['*:*'])
  assert.equal((await open.getInfo()).allowInternetAccess, true)
})
