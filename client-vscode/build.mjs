// Bundles the extension (dist/extension.js) and, with --tests, each unit test (out/test/*.test.js).
// esbuild only strips types: `npm run typecheck` (tsc --noEmit) is what enforces them.
import * as esbuild from 'esbuild';
import { readdirSync, rmSync } from 'node:fs';

const args = new Set(process.argv.slice(2));
const production = args.has('--production');

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node18',
  logLevel: 'warning',
};

if (args.has('--tests')) {
  rmSync('out/test', { recursive: true, force: true });
  await esbuild.build({
    ...common,
    entryPoints: readdirSync('test').filter((f) => f.endsWith('.test.ts')).map((f) => `test/${f}`),
    outdir: 'out/test',
    sourcemap: 'inline',
    // The unit tests cover the pure modules; importing `vscode` from one is a bug this catches.
    external: [],
  });
} else {
  const options = {
    ...common,
    entryPoints: ['src/extension.ts'],
    outfile: 'dist/extension.js',
    external: ['vscode'],
    sourcemap: production ? false : 'linked',
    minify: production,
  };
  if (args.has('--watch')) {
    const ctx = await esbuild.context(options);
    await ctx.watch();
  } else {
    await esbuild.build(options);
  }
}
