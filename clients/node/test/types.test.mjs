// The TypeScript declarations, checked by tsc --strict as a user's code would be, and held to
// what the package exports at run time.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import path from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'
import * as esm from 'fenced-lock'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const require = createRequire(import.meta.url)
const tsc = path.join(path.dirname(require.resolve('typescript/package.json')), 'bin', 'tsc')

function compile(...args) {
  const run = spawnSync(process.execPath, [tsc, ...args], { cwd: path.join(HERE, 'typed'), encoding: 'utf8' })
  return { status: run.status, output: run.stdout + run.stderr }
}

test('the declarations compile in ES module and CommonJS code (tsc --strict)', () => {
  const { status, output } = compile('-p', 'tsconfig.json')
  assert.equal(status, 0, output)
})

test('and refuse a misuse', () => {
  const { status, output } = compile('-p', 'tsconfig.wrong.json')
  assert.notEqual(status, 0)
  assert.match(output, /Type 'bigint' is not assignable to type 'number'/)
  assert.match(output, /ttlMs/)
})

test('both entries export the same names', () => {
  const cjs = require('fenced-lock')
  const named = Object.keys(esm).filter((name) => name !== 'default').sort()
  assert.deepEqual(named, Object.keys(cjs).sort())
  assert.equal(esm.default, cjs)
})
