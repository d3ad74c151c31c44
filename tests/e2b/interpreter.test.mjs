// The official @e2b/code-interpreter SDK against cela (docs/e2b.md "Code
// interpreter"): Sandbox.create() with its default template (code-interpreter-v1, an
// alias of cela's code-interpreter template), runCode on a real IPython kernel inside
// the sandbox, reached through the data plane's port route (E2b-Sandbox-Port 49999).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

let sbx

before(async () => {
  sbx = await Sandbox.create({ timeoutMs: 300_000 })
})

after(async () => {
  if (sbx) await sbx.kill()
})

test('the default template is the code interpreter, seen by the native API too', async () => {
  const res = await fetch(`${process.env.CELA_URL}/v1/sessions/${sbx.sandboxId}`, {
    headers: { Authorization: `Bearer ${process.env.CELA_KEY}` },
  })
  assert.equal(res.status, 200)
  const s = await res.json()
  assert.match(s.template, /^code-interpreter@/)
})

test('print goes to stdout', async () => {
  const ex = await sbx.runCode('print("hello from the kernel")')
  assert.deepEqual(ex.logs.stdout, ['hello from the kernel\n'])
  assert.deepEqual(ex.logs.stderr, [])
  assert.equal(ex.error, undefined)
})

test('an expression is the main result, as text', async () => {
  const ex = await sbx.runCode('21 * 2')
  assert.equal(ex.text, '42')
  assert.equal(ex.results.length, 1)
  assert.equal(ex.results[0].isMainResult, true)
  assert.ok(ex.executionCount >= 1)
})

test('a matplotlib figure comes back as a png result', async () => {
  const ex = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.title("cela")\nplt.show()'
  )
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback)
  const png = ex.results.find((r) => r.png)
  assert.ok(png, `no png in ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
  const bytes = Buffer.from(png.png, 'base64')
  assert.deepEqual([...bytes.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47])
  assert.ok(bytes.length > 1000)
})

test('a pandas DataFrame has text and html', async () => {
  const ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": [3, 4]})')
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback)
  assert.match(ex.results[0].text, /a\s+b/)
  assert.match(ex.results[0].html, /<table/)
})

test('an exception is an error with name, value and traceback', async () => {
  const ex = await sbx.runCode('def f():\n    raise ValueError("bad value 7")\nf()')
  assert.ok(ex.error)
  assert.equal(ex.error.name, 'ValueError')
  assert.equal(ex.error.value, 'bad value 7')
  // IPython colours its tracebacks (as E2B's do): read it without the escapes.
  const plain = ex.error.traceback.replace(/\x1b\[[0-9;]*m/g, '')
  assert.match(plain, /ValueError: bad value 7/)
  assert.match(plain, /----> 3 f\(\)/)
})

test('state persists between calls', async () => {
  await sbx.runCode('counter = 41\nimport os\nos.chdir("/tmp")')
  const ex = await sbx.runCode('counter += 1\n(counter, os.getcwd())')
  assert.equal(ex.text, "(42, '/tmp')")
})

test('code runs as user, with env_vars for one execution', async () => {
  const ex = await sbx.runCode('import os, getpass\nprint(getpass.getuser(), os.environ.get("CELA_T"))', {
    envs: { CELA_T: 'one-run' },
  })
  assert.deepEqual(ex.logs.stdout, ['user one-run\n'])
  const again = await sbx.runCode('import os\nprint(os.environ.get("CELA_T"))')
  assert.deepEqual(again.logs.stdout, ['None\n'])
})

test('a context of its own: created, used, listed, restarted, removed', async () => {
  const ctx = await sbx.createCodeContext({ cwd: '/tmp', language: 'python' })
  assert.equal(ctx.cwd, '/tmp')
  assert.equal(ctx.language, 'python')
  await sbx.runCode('mine = "in the context"', { context: ctx })
  const ex = await sbx.runCode('import os\n(mine, os.getcwd())', { context: ctx })
  assert.equal(ex.text, "('in the context', '/tmp')")
  // The default context does not see it.
  const other = await sbx.runCode('mine')
  assert.equal(other.error.name, 'NameError')
  const listed = await sbx.listCodeContexts()
  assert.ok(listed.some((c) => c.id === ctx.id))
  await sbx.restartCodeContext(ctx)
  const after = await sbx.runCode('mine', { context: ctx })
  assert.equal(after.error.name, 'NameError')
  await sbx.removeCodeContext(ctx)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
})

test('onStdout streams output while the cell still runs', async () => {
  const seen = []
  const t0 = Date.now()
  const ex = await sbx.runCode(
    'import time\nfor i in range(3):\n    print("tick", i, flush=True)\n    time.sleep(0.7)',
    { onStdout: (m) => seen.push([m.line, Date.now() - t0]) }
  )
  assert.deepEqual(
    seen.map(([line]) => line),
    ['tick 0\n', 'tick 1\n', 'tick 2\n']
  )
  // The first line arrived well before the cell ended (about 2.1 s).
  assert.ok(seen[0][1] < seen[2][1] - 1000, JSON.stringify(seen))
  assert.equal(ex.logs.stdout.length, 3)
})
