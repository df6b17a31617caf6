// kiln_fill_jobs (tests/tools/fill_jobs.c) from node: fill a data directory's
// store with ended jobs made by fixed rules, and the same rules in JS, so a
// test can compute what any filter, search or sort of GET /api/v1/jobs
// should answer. Keep fillRule in step with fill_jobs.c's header comment.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './kiln.mjs';

export function fillJobsBin() {
  const bin = process.env.KILN_FILL_JOBS || path.join(ROOT, 'build', 'tests', 'kiln_fill_jobs');
  if (!existsSync(bin)) throw new Error(`${bin} is missing: build the kiln_fill_jobs target (or set KILN_FILL_JOBS)`);
  return bin;
}

/* Adds three datasets and count jobs (owner: a user id, or 0) to dataDir's
 * store. Returns {datasets: [d1, d2, d3], first, last} (ids). */
export function fillJobs(dataDir, count, owner = 0) {
  mkdirSync(dataDir, { recursive: true });
  const args = [path.join(dataDir, 'kiln.db'), String(count)];
  if (owner) args.push(String(owner));
  return JSON.parse(execFileSync(fillJobsBin(), args, { encoding: 'utf8' }));
}

const NETWORKS = ['lenet', 'resnet20', 'cifar10-cnn', 'alexnet'];
const PRECISIONS = ['fp32', 'amp-bf16', 'amp-fp16'];
const STATUSES = ['done', 'done', 'done', 'failed', 'cancelled'];
export const FILL_DATASETS = ['digits', 'cifar', 'letters'];

/* Job i (1-based) of a fill as the API shows it (less what the rule does not fix). */
export function fillRule(i, fill) {
  const epochs = 1 + (i % 20);
  const steps = 100 * epochs;
  const status = STATUSES[i % 5];
  const step = status === 'done' ? steps : (i * 37) % steps;
  const tags = [];
  if (i % 3 === 0) tags.push('sweep');
  if (i % 5 === 0) tags.push('baseline');
  return {
    id: fill.first + i - 1,
    dataset_id: fill.datasets[i % 3],
    dataset_name: FILL_DATASETS[i % 3],
    network: NETWORKS[i % 4],
    precision: PRECISIONS[Math.floor(i / 3) % 3],
    name: i % 7 === 0 ? '' : `run-${String(i).padStart(5, '0')}`,
    epochs,
    status,
    progress: status === 'done' ? 1 : step / steps,
    tags,
    notes: i % 11 === 0 ? `note ${i}` : '',
  };
}

export function fillModel(fill, count) {
  return Array.from({ length: count }, (_, k) => fillRule(k + 1, fill));
}
