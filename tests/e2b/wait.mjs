// Waiting helpers shared by the suites of tests/e2b.
import assert from 'node:assert/strict'

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Polls `check` until it returns something truthy (returned), failing after `ms`.
export async function until(what, check, ms = 20_000, every = 250) {
  const end = Date.now() + ms
  for (;;) {
    const v = await check()
    if (v) return v
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`)
    await sleep(every)
  }
}
