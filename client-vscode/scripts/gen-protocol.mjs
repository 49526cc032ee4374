// Generates src/protocol.gen.ts, the wire protocol's TypeScript types, from the JSON Schema that
// coven-ls exports (coven_ls/protocol/schema.json, made by `python -m coven_ls.protocol.schema`),
// and src/labels.gen.ts, what the clients print for the protocol's values (status words, API
// failure names), from coven_ls/protocol/labels.json: the same table coven-ls's renderers read.
//
//   node scripts/gen-protocol.mjs           write src/protocol.gen.ts and src/labels.gen.ts
//   node scripts/gen-protocol.mjs --check   exit 1 if either is not what its source gives (npm test runs this)
//
// json-schema-to-typescript compiles the schema's root, whose properties point at the roots of the
// protocol (the method tables, Event, the enums, …); with declareExternallyReferenced and
// unreachableDefinitions every $def becomes a named export, which this script checks.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { compile } from 'json-schema-to-typescript';

const SCHEMA = fileURLToPath(new URL('../../coven_ls/protocol/schema.json', import.meta.url));
const OUTPUT = fileURLToPath(new URL('../src/protocol.gen.ts', import.meta.url));
const LABELS = fileURLToPath(new URL('../../coven_ls/protocol/labels.json', import.meta.url));
const LABELS_OUTPUT = fileURLToPath(new URL('../src/labels.gen.ts', import.meta.url));
const ROOT_NAME = 'CovenProtocol';

const BANNER = `// generated from coven_ls/protocol/schema.json by scripts/gen-protocol.mjs; do not edit.
// Regenerate with \`npm run gen:protocol\` (after \`python -m coven_ls.protocol.schema\` when the
// Python types changed); \`npm test\` fails while this file is stale.`;

/**
 * Two rewrites of the schema before it is compiled; neither changes what it accepts as a type:
 * - A `$ref` with sibling keywords (a property's own `description` or `default`, e.g. PromptEvent's
 *   `origin`) would become a second named copy of the target (`Origin1`, `ForkMode1`). Wrapped as
 *   `allOf: [{$ref}]`, the property keeps its description and uses the named type itself.
 * - Wire objects get no index signature (additionalProperties defaults to false below: clients
 *   ignore fields they do not know, which a type need not model, and a typo in a field we send
 *   stays a compile error). A free-form object (`{"type": "object"}` with no `properties`, e.g. a
 *   tool's `input`) is a map, though: it becomes `{[k: string]: unknown}` rather than `{}`.
 */
function prepare(node) {
  if (Array.isArray(node)) return node.map(prepare);
  if (node === null || typeof node !== 'object') return node;
  const out = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, prepare(v)]));
  if (typeof out.$ref === 'string' && Object.keys(out).length > 1) {
    const { $ref, default: _default, ...rest } = out;
    return { ...rest, allOf: [{ $ref }] };
  }
  if (out.type === 'object' && !('properties' in out) && !('additionalProperties' in out) && !('patternProperties' in out)) {
    out.additionalProperties = true;
  }
  return out;
}

/** The generator's "This interface was referenced by `CovenProtocol`'s JSON-Schema via the
 * `definition` "X"." note on every named type: noise in every hover. */
function dropReferencedByNotes(text) {
  const note = String.raw` \*\n \* This interface was referenced by \`${ROOT_NAME}\`'s JSON-Schema\n \* via the \`definition\` "\w+"\.\n`;
  return text
    .replace(new RegExp(String.raw`/\*\*\n \* This interface was referenced by \`${ROOT_NAME}\`'s JSON-Schema\n \* via the \`definition\` "\w+"\.\n \*/\n`, 'g'), '')
    .replace(new RegExp(note, 'g'), '');
}

async function generate(schemaText = readFileSync(SCHEMA, 'utf8')) {
  const schema = JSON.parse(schemaText);
  const generated = await compile(prepare(schema), ROOT_NAME, {
    bannerComment: BANNER,
    additionalProperties: false,
    declareExternallyReferenced: true,
    unreachableDefinitions: true,
    unknownAny: true,
    strictIndexSignatures: false,
    // A real enum: ErrorCode's values exist at run time (isolatedModules, esbuild, the tests).
    enableConstEnums: false,
    format: true,
    style: { printWidth: 120, singleQuote: true, trailingComma: 'all', bracketSpacing: true, semi: true, tabWidth: 2, useTabs: false },
    // Every $ref is local (#/$defs/…): never fetch the $id's URL.
    $refOptions: { resolve: { external: false } },
    cwd: fileURLToPath(new URL('../../coven_ls/protocol/', import.meta.url)),
  });
  const text = dropReferencedByNotes(generated).replace(/\n*$/, '\n');

  // Every $def is exported under its own name, and nothing else is (no `Origin1`-style copies).
  const exported = [...text.matchAll(/^export (?:interface|type|enum) (\w+)/gm)].map((m) => m[1]);
  const expected = [ROOT_NAME, ...Object.keys(schema.$defs)];
  const missing = expected.filter((name) => !exported.includes(name));
  const extra = exported.filter((name) => !expected.includes(name));
  const twice = exported.filter((name, i) => exported.indexOf(name) !== i);
  if (missing.length || extra.length || twice.length) {
    throw new Error(
      `the generated types do not match the schema's $defs: missing ${missing.join(', ') || '-'}; ` +
        `unexpected ${extra.join(', ') || '-'}; twice ${twice.join(', ') || '-'}`,
    );
  }
  return text;
}

/** labels.json as TypeScript constants: one `export const` per table (its `$comment` left out). */
function generateLabels(labelsText = readFileSync(LABELS, 'utf8')) {
  const table = JSON.parse(labelsText);
  const parts = [
    '// generated from coven_ls/protocol/labels.json by scripts/gen-protocol.mjs; do not edit.',
    '// Regenerate with `npm run gen:protocol`; `npm test` fails while this file is stale.',
  ];
  for (const [name, values] of Object.entries(table)) {
    if (name.startsWith('$')) continue;
    const entries = Object.entries(values).map(([k, v]) => `  ${/^\w+$/.test(k) && !/^\d/.test(k) ? k : JSON.stringify(k)}: ${JSON.stringify(v)},`);
    parts.push('', `export const ${name}: Readonly<Record<string, string>> = {`, ...entries, '};');
  }
  return parts.join('\n') + '\n';
}

async function main(args) {
  const check = args.includes('--check');
  const unknown = args.filter((a) => a !== '--check');
  if (unknown.length > 0) {
    console.error(`usage: node scripts/gen-protocol.mjs [--check] (unknown: ${unknown.join(' ')})`);
    return 2;
  }
  const text = await generate();
  const labels = generateLabels();
  if (check) {
    let currentLabels = '';
    try {
      currentLabels = readFileSync(LABELS_OUTPUT, 'utf8');
    } catch {
      // missing: stale
    }
    if (currentLabels !== labels) {
      console.error(
        'src/labels.gen.ts is stale: it does not match coven_ls/protocol/labels.json. ' +
          'Run `npm run gen:protocol` in client-vscode and commit the result.',
      );
      return 1;
    }
    let current = '';
    try {
      current = readFileSync(OUTPUT, 'utf8');
    } catch {
      // missing: stale
    }
    if (current !== text) {
      console.error(
        'src/protocol.gen.ts is stale: it does not match coven_ls/protocol/schema.json. ' +
          'Run `npm run gen:protocol` in client-vscode and commit the result.',
      );
      return 1;
    }
    console.log('src/protocol.gen.ts matches coven_ls/protocol/schema.json');
    return 0;
  }
  writeFileSync(OUTPUT, text);
  writeFileSync(LABELS_OUTPUT, labels);
  console.log(`wrote ${OUTPUT} and ${LABELS_OUTPUT}`);
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
