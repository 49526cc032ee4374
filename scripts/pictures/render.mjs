// Draws README.md's pictures in headless Chromium (playwright-core, as the VS Code e2e drives it):
//
//   node render.mjs terminal IN OUT.png   the bytes a terminal received (chat_scene.py's IN, its
//                                         size in IN.json), drawn by xterm.js as a terminal shows
//                                         them: colours, cursor moves and redraws included
//   node render.mjs crop IN.png OUT.png X,Y,W,H [X,Y,W,H ...]
//                                         those regions of a screenshot, stacked top to bottom
//
// Run by scripts/pictures.sh, which sets COVEN_E2E_TOOLS (playwright-core), COVEN_E2E_CHROMIUM
// and COVEN_XTERM (the @xterm/xterm package folder).

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (run scripts/pictures.sh)`);
  return value;
};

// The terminal's colours: a dark theme close to VS Code's integrated terminal.
const THEME = {
  background: '#1e1e1e', foreground: '#cccccc', cursor: '#cccccc',
  black: '#000000', red: '#cd3131', green: '#0dbc79', yellow: '#e5e510', blue: '#2472c8',
  magenta: '#bc3fbc', cyan: '#11a8cd', white: '#e5e5e5', brightBlack: '#767676',
  brightRed: '#f14c4c', brightGreen: '#23d18b', brightYellow: '#f5f543', brightBlue: '#3b8eea',
  brightMagenta: '#d670d6', brightCyan: '#29b8db', brightWhite: '#e5e5e5',
};

async function withPage(body) {
  const { chromium } = createRequire(join(env('COVEN_E2E_TOOLS'), 'package.json'))('playwright-core');
  const browser = await chromium.launch({
    executablePath: env('COVEN_E2E_CHROMIUM'),
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1600, height: 1200 }, deviceScaleFactor: 1 });
    page.setDefaultTimeout(30_000);
    page.on('pageerror', (e) => console.error(`[pageerror] ${e.message}`));
    await body(page);
  } finally {
    await browser.close();
  }
}

async function terminal(input, output) {
  const { rows, columns } = JSON.parse(readFileSync(`${input}.json`, 'utf8'));
  const data = readFileSync(input, 'utf8');
  let used = 0;
  await withPage(async (page) => {
    await page.setContent(`<!doctype html><html><body style="margin:0;background:${THEME.background}">
      <div id="frame" style="display:inline-block;padding:14px 16px"><div id="terminal"></div></div></body></html>`);
    const xterm = env('COVEN_XTERM');
    await page.addStyleTag({ path: join(xterm, 'css', 'xterm.css') });
    await page.addScriptTag({ path: join(xterm, 'lib', 'xterm.js') });
    used = await page.evaluate(async ({ rows, columns, data, theme }) => {
      const term = new window.Terminal({
        rows, cols: columns, theme, fontFamily: "'DejaVu Sans Mono', monospace", fontSize: 14,
        lineHeight: 1.1, cursorBlink: false, scrollback: 0, allowProposedApi: true,
      });
      term.open(document.getElementById('terminal'));
      await new Promise((resolve) => term.write(data, resolve));
      // The session's end: prompt_toolkit leaves the rows under the prompt empty.
      const buffer = term.buffer.active;
      let last = 0;
      for (let y = 0; y < rows; y++) {
        if (buffer.getLine(buffer.viewportY + y)?.translateToString(true).trim()) last = y;
      }
      term.blur();
      return last + 1;
    }, { rows, columns, data, theme: THEME });
    const frame = await page.locator('#frame').boundingBox();
    const screen = await page.locator('.xterm-screen').boundingBox();
    const rowHeight = screen.height / rows;
    const height = Math.ceil(screen.y - frame.y + used * rowHeight + 14);
    await page.screenshot({ path: output, clip: { x: frame.x, y: frame.y, width: Math.ceil(frame.width), height } });
  });
  console.error(`render: ${output} (${used} of ${rows} rows)`);
}

async function crop(input, output, regions) {
  const boxes = regions.map((r) => {
    const [x, y, width, height] = r.split(',').map(Number);
    if (![x, y, width, height].every(Number.isFinite)) throw new Error(`a region is X,Y,W,H: ${r}`);
    return { x, y, width, height };
  });
  const url = `data:image/png;base64,${readFileSync(input).toString('base64')}`;
  const width = Math.max(...boxes.map((b) => b.width));
  const parts = boxes
    .map((b) => `<div style="width:${b.width}px;height:${b.height}px;overflow:hidden"><img src="${url}" style="display:block;margin:-${b.y}px 0 0 -${b.x}px"></div>`)
    .join('');
  await withPage(async (page) => {
    await page.setContent(`<!doctype html><html><body style="margin:0"><div id="c" style="width:${width}px">${parts}</div></body></html>`);
    await page.waitForFunction(() => [...document.images].every((i) => i.complete));
    const [naturalWidth, naturalHeight] = await page.evaluate(() => [document.images[0].naturalWidth, document.images[0].naturalHeight]);
    const outside = boxes.filter((b) => b.x + b.width > naturalWidth || b.y + b.height > naturalHeight);
    // A screenshot of another size has its tree elsewhere: the regions would crop the wrong part.
    if (outside.length) throw new Error(`${input} is ${naturalWidth}×${naturalHeight}: ${JSON.stringify(outside)} is not inside it`);
    await page.locator('#c').screenshot({ path: output });
  });
  console.error(`render: ${output} (${boxes.length} regions of ${input})`);
}

const [mode, input, output, ...rest] = process.argv.slice(2);
if (mode === 'terminal' && input && output) await terminal(input, output);
else if (mode === 'crop' && input && output && rest.length) await crop(input, output, rest);
else {
  console.error('usage: render.mjs terminal IN OUT.png | render.mjs crop IN.png OUT.png X,Y,W,H...');
  process.exit(2);
}
