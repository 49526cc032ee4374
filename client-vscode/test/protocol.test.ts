// The hand-written parts of the protocol module against the schema they sit on
// (coven_ls/protocol/schema.json, read here at test time): the method table, and the status sets
// the model keeps.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, test } from 'node:test';

import { BUSY_STATUSES, ENDED_STATUSES, FORK_STATES, MESSAGEABLE_STATUSES } from '../src/model';
import { type AnyMethod, ErrorCode, Method, type ParamsOf, PROTOCOL_VERSION, type ResultOf } from '../src/protocol';
import { loadFixture, SCENARIOS } from './fixtures';

interface Schema {
  $defs: Record<string, { properties?: Record<string, unknown>; enum?: unknown[]; tsEnumNames?: string[] }>;
}

// out/test/protocol.test.js → the repository root.
const schema = JSON.parse(readFileSync(resolve(__dirname, '../../../coven_ls/protocol/schema.json'), 'utf8')) as Schema;
const def = (name: string) => {
  const found = schema.$defs[name];
  assert.ok(found, `the schema has no $defs.${name}`);
  return found;
};
const methodsOf = (table: string): string[] => Object.keys(def(table).properties ?? {});
const enumOf = (name: string): unknown[] => def(name).enum ?? [];

describe('protocol', () => {
  test('Method names every method of the schema, and only those', () => {
    const tables = ['Requests', 'ServerRequests', 'Notifications'];
    const inSchema = tables.flatMap(methodsOf);
    assert.ok(inSchema.length > 0);
    const inTable = Object.values(Method);
    for (const method of inSchema) assert.ok(inTable.includes(method as never), `Method lacks ${method}`);
    for (const method of inTable) assert.ok(inSchema.includes(method), `${method} is in Method but not in the schema's ${tables.join('/')}`);
    assert.equal(new Set(inTable).size, inTable.length, 'a method is in Method twice');
    // The same, checked by the compiler against the generated tables: nothing is missing.
    type Missing = Exclude<AnyMethod, (typeof Method)[keyof typeof Method]>;
    const complete: [Missing] extends [never] ? true : Missing = true;
    assert.equal(complete, true);
  });

  test("a method's short name is its name without the coven/ prefix", () => {
    for (const [name, method] of Object.entries(Method)) assert.equal(method, `coven/${name}`);
  });

  test('ParamsOf and ResultOf look a method up in either request table', () => {
    const params: ParamsOf<typeof Method.fork> = { sessionId: 's', tasks: ['a'] };
    const result: ResultOf<typeof Method.fork> = { forkId: 'f' };
    const answer: ResultOf<typeof Method.requestPermission> = { allow: false, message: 'no' };
    assert.deepEqual([params.tasks, result.forkId, answer.allow], [['a'], 'f', false]);
  });

  test('ErrorCode is the schema’s, by name and value', () => {
    const { enum: values = [], tsEnumNames: names = [] } = def('ErrorCode');
    assert.equal(names.length, values.length);
    const generated = Object.fromEntries(Object.entries(ErrorCode).filter(([key]) => Number.isNaN(Number(key))));
    assert.deepEqual(generated, Object.fromEntries(names.map((name, i) => [name, values[i]])));
  });

  test("the model's status sets hold statuses of the schema", () => {
    const statuses = enumOf('Status');
    for (const set of [BUSY_STATUSES, ENDED_STATUSES, MESSAGEABLE_STATUSES]) {
      for (const status of set) assert.ok(statuses.includes(status), `${status} is not a Status`);
    }
  });

  test('a fork child counts as done once it settled, unless a server restart interrupted it', () => {
    const settled = enumOf('SettledStatus');
    assert.deepEqual([...ENDED_STATUSES].sort(), settled.filter((s) => s !== 'interrupted').sort());
  });

  test("this client's protocol version is the one the recorded servers announced", () => {
    const announced = new Set<unknown>();
    for (const name of SCENARIOS) {
      for (const line of loadFixture(name).lines) if (line.marker?.fixture === 'serverStarted') announced.add(line.marker.protocolVersion);
    }
    assert.deepEqual([...announced], [PROTOCOL_VERSION]);
    const version = def('CovenServerCapabilities').properties?.protocolVersion as { type?: string } | undefined;
    assert.equal(version?.type, 'integer');
  });

  test("the model's fork states are the schema's ForkState, no more, no less", () => {
    assert.deepEqual([...FORK_STATES].sort(), (enumOf('ForkState') as string[]).sort());
  });
});
