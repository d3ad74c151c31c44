// The E2B data plane's files (docs/e2b.md "Data plane: files"), driven by the official
// SDK: /files downloads and uploads, the filesystem.Filesystem RPCs and WatchDir, as
// the chosen user; and the attacks at the HTTP edge: paths and planted symlinks that
// aim at the host, another sandbox's token, and watches that try to spend host root's
// inotify budget.
import { test, after, before } from 'node:test'
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { gzipSync } from 'node:zlib'
import { Sandbox, FileType } from 'e2b'

const SANDBOX_URL = process.env.E2B_SANDBOX_URL
const CELA_URL = process.env.CELA_URL
const CELA_KEY = process.env.CELA_KEY

let sbx
let other
const hostDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cela-e2b-files-host-'))
const hostSecret = path.join(hostDir, 'secret')
fs.writeFileSync(hostSecret, 'HOST-SECRET')

const native = (p, init = {}) =>
  fetch(`${CELA_URL}${p}`, {
    ...init,
    headers: { Authorization: `Bearer ${CELA_KEY}`, 'Content-Type': 'application/json', ...(init.headers ?? {}) },
  })

// A sandbox through the SDK's create; where the control plane cannot create one, a
// native session reached through the SDK with the envd token cela derives for it
// (api/e2b/tokens.h), so the data plane is tested either way.
async function makeSandbox() {
  try {
    return await Sandbox.create({ timeoutMs: 300_000 })
  } catch (e) {
    if (!process.env.CELA_STATE_DIR) throw e
  }
  const res = await native('/v1/sessions', { method: 'POST', body: JSON.stringify({ template: 'base' }) })
  const rec = await res.json()
  assert.equal(res.status, 201, JSON.stringify(rec))
  const secret = fs.readFileSync(path.join(process.env.CELA_STATE_DIR, 'e2b-token.key'), 'utf8').split('\n')[0]
  const tenants = await (await native('/v1/tenants')).json()
  const tenant = tenants.tenants.find((t) => t.name === 'default').id
  const mac = crypto.createHmac('sha256', secret).update(`envd\0${tenant}\0${rec.id}`).digest('hex')
  return new Sandbox({ sandboxId: rec.id, envdVersion: '0.6.3', envdAccessToken: `${tenant}.${mac}` })
}

before(async () => {
  sbx = await makeSandbox()
  other = await makeSandbox()
})

after(async () => {
  for (const s of [sbx, other]) if (s) await native(`/v1/sessions/${s.sandboxId}`, { method: 'DELETE' }).catch(() => {})
  fs.rmSync(hostDir, { recursive: true, force: true })
})

// A shell command in the sandbox through cela's own API (what planted the symlinks).
async function sh(id, cmd, user = 'user') {
  const res = await native(`/v1/sessions/${id}/run`, {
    method: 'POST',
    body: JSON.stringify({ argv: ['/bin/sh', '-c', cmd], user }),
  })
  const body = await res.json()
  assert.equal(res.status, 200, JSON.stringify(body))
  return body
}

// A raw data-plane request, as the SDK sends it.
function envd(s, pathAndQuery, init = {}, token = s.envdAccessToken) {
  return fetch(`${SANDBOX_URL}${pathAndQuery}`, {
    ...init,
    headers: { 'E2b-Sandbox-Id': s.sandboxId, 'X-Access-Token': token, ...(init.headers ?? {}) },
  })
}

// Inotify instances held by host processes whose real uid is 0 (the daemon included).
function rootInotifyInstances() {
  let n = 0
  for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const uid = /^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
      if (uid !== '0') continue
      for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
        try {
          if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === 'anon_inode:inotify') n++
        } catch {}
      }
    } catch {}
  }
  return n
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms))
}

async function until(pred, ms = 10_000) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (pred()) return true
    await sleep(50)
  }
  return pred()
}

test('write and read text, bytes, blob and stream', async () => {
  const info = await sbx.files.write('/home/user/t.txt', 'hello files')
  assert.equal(info.path, '/home/user/t.txt')
  assert.equal(info.name, 't.txt')
  assert.equal(info.type, FileType.FILE)
  assert.equal(await sbx.files.read('/home/user/t.txt'), 'hello files')
  const bytes = new Uint8Array(70_000).map((_, i) => i % 251)
  await sbx.files.write('bin.dat', bytes.buffer) // relative: the user's home
  const back = await sbx.files.read('/home/user/bin.dat', { format: 'bytes' })
  assert.deepEqual(Buffer.from(back), Buffer.from(bytes))
  const blob = await sbx.files.read('/home/user/t.txt', { format: 'blob' })
  assert.equal(await blob.text(), 'hello files')
  const stream = await sbx.files.read('/home/user/bin.dat', { format: 'stream' })
  const chunks = []
  for await (const c of stream) chunks.push(Buffer.from(c))
  assert.deepEqual(Buffer.concat(chunks), Buffer.from(bytes))
  await sbx.files.write('/home/user/blob.txt', new Blob(['from a blob']))
  assert.equal(await sbx.files.read('/home/user/blob.txt'), 'from a blob')
  await sbx.files.write('/home/user/empty', '')
  assert.equal(await sbx.files.read('/home/user/empty'), '')
  // A streamed upload (octet-stream, never buffered by the SDK).
  const rs = new ReadableStream({
    start(c) {
      c.enqueue(new TextEncoder().encode('streamed '))
      c.enqueue(new TextEncoder().encode('body'))
      c.close()
    },
  })
  await sbx.files.write('/home/user/deep/er/streamed.txt', rs)
  assert.equal(await sbx.files.read('/home/user/deep/er/streamed.txt'), 'streamed body')
  await assert.rejects(sbx.files.read('/home/user/missing'), (e) => e.name === 'FileNotFoundError')
})

test('several files in one upload, gzip and octet-stream', async () => {
  const infos = await sbx.files.write([
    { path: '/home/user/multi/a.txt', data: 'A' },
    { path: 'multi/b.txt', data: 'B' },
    { path: '/home/user/multi/sub/c.txt', data: new Blob(['C']) },
  ])
  assert.deepEqual(infos.map((i) => i.path).sort(), ['/home/user/multi/a.txt', '/home/user/multi/b.txt', '/home/user/multi/sub/c.txt'])
  assert.equal(await sbx.files.read('/home/user/multi/b.txt'), 'B')
  assert.equal(await sbx.files.read('/home/user/multi/sub/c.txt'), 'C')
  const big = 'z'.repeat(3_000_000)
  await sbx.files.write('/home/user/gz.txt', big, { gzip: true })
  assert.equal((await sbx.files.read('/home/user/gz.txt')).length, big.length)
  await sbx.files.write('/home/user/oct.txt', 'octets', { useOctetStream: true })
  assert.equal(await sbx.files.read('/home/user/oct.txt'), 'octets')
  // Raw: a gzip body, and one that is not gzip at all.
  const ok = await envd(sbx, '/files?path=/home/user/raw.gz.txt', {
    method: 'POST',
    headers: { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' },
    body: gzipSync(Buffer.from('raw gzip')),
  })
  assert.equal(ok.status, 200)
  assert.deepEqual(await ok.json(), [{ path: '/home/user/raw.gz.txt', name: 'raw.gz.txt', type: 'file' }])
  const bad = await envd(sbx, '/files?path=/home/user/bad.gz', {
    method: 'POST',
    headers: { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' },
    body: 'not gzip',
  })
  assert.equal(bad.status, 400)
  assert.equal((await bad.json()).code, 400)
  const missing = await envd(sbx, '/files?path=/home/user/nope')
  assert.equal(missing.status, 404)
  assert.equal((await missing.json()).code, 404)
})

test('list, exists, getInfo, metadata', async () => {
  await sbx.files.write('/home/user/tree/one.txt', '1')
  await sbx.files.write('/home/user/tree/sub/two.txt', '22')
  const d1 = await sbx.files.list('/home/user/tree')
  assert.deepEqual(d1.map((e) => e.name).sort(), ['one.txt', 'sub'])
  const d2 = await sbx.files.list('/home/user/tree', { depth: 2 })
  assert.deepEqual(d2.map((e) => e.path).sort(), ['/home/user/tree/one.txt', '/home/user/tree/sub', '/home/user/tree/sub/two.txt'])
  assert.equal(await sbx.files.exists('/home/user/tree/one.txt'), true)
  assert.equal(await sbx.files.exists('/home/user/tree/none'), false)
  const info = await sbx.files.getInfo('/home/user/tree/sub/two.txt')
  assert.equal(info.name, 'two.txt')
  assert.equal(info.type, FileType.FILE)
  assert.equal(info.path, '/home/user/tree/sub/two.txt')
  assert.equal(info.size, 2)
  assert.equal(info.mode, 0o644)
  assert.equal(info.permissions, '-rw-r--r--')
  assert.equal(info.owner, 'user')
  assert.equal(info.group, 'user')
  assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 120_000)
  const dir = await sbx.files.getInfo('/home/user/tree/sub')
  assert.equal(dir.type, FileType.DIR)
  assert.equal(dir.permissions, 'drwxr-xr-x')
  await sh(sbx.sandboxId, 'ln -s /home/user/tree/one.txt /home/user/tree/link')
  const link = await sbx.files.getInfo('/home/user/tree/link')
  assert.equal(link.symlinkTarget, '/home/user/tree/one.txt')
  assert.equal(link.type, FileType.FILE)
  await sbx.files.write('/home/user/meta.txt', 'm', { metadata: { Team: 'blue' } })
  assert.deepEqual((await sbx.files.getInfo('/home/user/meta.txt')).metadata, { team: 'blue' })
})

test('remove, rename, makeDir', async () => {
  assert.equal(await sbx.files.makeDir('/home/user/made/deep'), true)
  assert.equal(await sbx.files.makeDir('/home/user/made/deep'), false)
  assert.equal((await sbx.files.getInfo('/home/user/made/deep')).owner, 'user')
  await sbx.files.write('/home/user/made/f', 'f')
  const moved = await sbx.files.rename('/home/user/made/f', '/home/user/made/g')
  assert.equal(moved.path, '/home/user/made/g')
  assert.equal(await sbx.files.exists('/home/user/made/f'), false)
  await sbx.files.remove('/home/user/made')
  assert.equal(await sbx.files.exists('/home/user/made'), false)
})

test('files are written and read as the chosen user', async () => {
  await sbx.files.write('/home/user/as-user', 'u')
  assert.equal((await sbx.files.getInfo('/home/user/as-user')).owner, 'user')
  await sbx.files.write('/home/user/as-root', 'r', { user: 'root' })
  assert.equal((await sbx.files.getInfo('/home/user/as-root')).owner, 'root')
  const ls = await sh(sbx.sandboxId, 'stat -c %U /home/user/as-user /home/user/as-root')
  assert.equal(ls.stdout, 'user\nroot\n')
  await sbx.files.write('/root/only-root', 'x', { user: 'root' })
  await assert.rejects(sbx.files.write('/root/by-user', 'x'))
  await assert.rejects(sbx.files.read('/root/only-root'))
  assert.equal(await sbx.files.read('/root/only-root', { user: 'root' }), 'x')
  assert.equal(await sbx.files.exists('/root/by-user', { user: 'root' }), false)
  await assert.rejects(sbx.files.makeDir('/root/dir-by-user'))
  // A relative path is relative to the chosen user's home.
  await sbx.files.write('rel-root', 'rr', { user: 'root' })
  assert.equal(await sbx.files.read('/root/rel-root', { user: 'root' }), 'rr')
})

test('paths and planted symlinks never reach the host', async () => {
  const hostRel = hostSecret.slice(1)
  for (const p of [`/../../../../../../${hostRel}`, `../../../../../../../${hostRel}`, hostSecret]) {
    const res = await envd(sbx, `/files?path=${encodeURIComponent(p)}`)
    const body = await res.text()
    assert.ok(!body.includes('HOST-SECRET'), p)
    assert.notEqual(res.status, 200, p)
  }
  await sh(sbx.sandboxId, `ln -s ${hostSecret} /home/user/leak; ln -s ../../../../../../../..${hostDir} /home/user/out`)
  const leak = await envd(sbx, '/files?path=/home/user/leak')
  assert.ok(!(await leak.text()).includes('HOST-SECRET'))
  const w = await envd(sbx, '/files?path=/home/user/out/planted', {
    method: 'POST',
    headers: { 'Content-Type': 'application/octet-stream' },
    body: 'should stay in the sandbox',
  })
  await w.text()
  assert.deepEqual(fs.readdirSync(hostDir), ['secret'])
  assert.equal(fs.readFileSync(hostSecret, 'utf8'), 'HOST-SECRET')
  // Listing through the planted link lists the sandbox's own tree (here: nothing).
  const listed = await sbx.files.list('/home/user/out').catch(() => [])
  assert.ok(!listed.some((e) => e.name === 'secret'))
})

test('another sandbox token is refused', async () => {
  const res = await envd(sbx, '/files?path=/home/user/t.txt', {}, other.envdAccessToken)
  assert.equal(res.status, 401)
  const rpc = await envd(sbx, '/filesystem.Filesystem/Stat', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ path: '/home/user' }),
  }, other.envdAccessToken)
  assert.equal(rpc.status, 401)
  const none = await envd(sbx, '/files?path=/home/user/t.txt', {}, '')
  assert.equal(none.status, 401)
})

test('watchDir reports create, write, remove; recursive too', async () => {
  await sbx.files.makeDir('/home/user/w/inner')
  const events = []
  const h = await sbx.files.watchDir('/home/user/w', (e) => events.push(e), { includeEntry: true })
  await sbx.files.write('/home/user/w/new.txt', 'x')
  await sh(sbx.sandboxId, 'echo more >> /home/user/w/new.txt; rm /home/user/w/new.txt; touch /home/user/w/inner/deep')
  assert.ok(await until(() => events.some((e) => e.type === 'remove' && e.name === 'new.txt')), JSON.stringify(events))
  assert.ok(events.some((e) => e.type === 'create' && e.name === 'new.txt'))
  assert.ok(events.some((e) => e.type === 'write' && e.name === 'new.txt'))
  assert.ok(events.some((e) => e.type === 'create' && e.name === 'new.txt' && e.entry?.type === FileType.FILE) ||
    events.some((e) => e.type === 'write' && e.entry?.path === '/home/user/w/new.txt'))
  assert.ok(!events.some((e) => e.name.startsWith('inner/')), 'not recursive')
  await h.stop()
  const rec = []
  const h2 = await sbx.files.watchDir('/home/user/w', (e) => rec.push(e), { recursive: true })
  await sh(sbx.sandboxId, 'mkdir -p /home/user/w/inner/later && sleep 0.3 && echo x > /home/user/w/inner/later/f')
  assert.ok(await until(() => rec.some((e) => e.name === 'inner/later/f' && e.type === 'create')), JSON.stringify(rec))
  await h2.stop()
  await assert.rejects(sbx.files.watchDir('/home/user/nowhere', () => {}))
  await assert.rejects(sbx.files.watchDir('/root', () => {}))
})

test('watches spend the session inotify budget, not host root', async () => {
  const before = rootInotifyInstances()
  // The sandbox user takes all but two of its 128 inotify instances itself.
  const holder = sh(sbx.sandboxId,
    "python3 -c \"import ctypes,time\nl=ctypes.CDLL(None)\nfds=[l.inotify_init() for _ in range(126)]\nprint(sum(1 for f in fds if f>=0),flush=True)\ntime.sleep(8)\"")
  await sleep(1500)
  const handles = []
  let refused = null
  for (let i = 0; i < 4 && !refused; i++) {
    try {
      handles.push(await sbx.files.watchDir('/home/user', () => {}))
    } catch (e) {
      refused = e
    }
  }
  assert.ok(refused, 'a watch past the session budget must fail')
  assert.match(String(refused.message), /inotify instances/, String(refused))
  assert.ok(handles.length <= 2, `${handles.length} watches past a budget of 2`)
  assert.equal(rootInotifyInstances(), before, 'host root inotify instances changed')
  for (const h of handles) await h.stop()
  const held = await holder
  assert.equal(held.stdout.trim(), '126')
})
