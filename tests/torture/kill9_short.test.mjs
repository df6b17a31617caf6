// ctest's short run of the kill -9 torture (tests/torture/kill9.mjs): three
// kills (server, worker or server during an import, as seed 7 chooses) of two
// small LeNet jobs at a time, with every check of the long run: jobs end done
// or failed with a reason, interrupted jobs resume from their checkpoints, no
// metric up to a kill's checkpoint is lost, integrity_check is ok after each
// server kill, done jobs' models load. About 40 s on 2 cores.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const script = path.join(path.dirname(fileURLToPath(import.meta.url)), 'kill9.mjs');

test('kill -9 of the server and its workers three times loses nothing', { timeout: 600_000 }, async () => {
  const child = spawn(process.execPath, [script, '--seed', '7', '--kills', '3', '--parallel', '2', '--epochs', '2',
    '--time-limit', '540'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d) => { out += d; });
  child.stderr.setEncoding('utf8').on('data', (d) => { out += d; });
  const code = await new Promise((res) => child.on('close', (c, s) => res(c ?? s)));
  console.log(out.slice(-6000));
  assert.equal(code, 0, `kill9.mjs exited ${code}:\n${out.slice(-6000)}`);
  assert.match(out, /kills:\s+3 \(/, 'three kills were made');
  assert.match(out, /metrics lost:\s+0 of [1-9]/, 'metrics were compared and none lost');
  assert.match(out, /integrity checks:\s+[1-9]\d* passed, 0 failed/);
});
