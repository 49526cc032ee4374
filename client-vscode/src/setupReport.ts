// "Coven: Check Setup" as a page: `coven-ls doctor --json` (a DoctorReport) rendered to HTML.
// Pure (no `vscode`), so what the user reads is unit-tested in plain node.

import type { DoctorReport, Finding } from './protocol';

const MARK: Record<Finding['status'], string> = { ok: '✓', warning: '!', error: '✗' };

const escape = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** The page: a verdict, then one row per finding with what was found and its fix. */
export function setupHtml(report: DoctorReport | undefined, server: string, failure?: string): string {
  const verdict =
    report === undefined
      ? `<p class="error">coven-ls could not check the set-up: ${escape(failure ?? 'no report')}</p>`
      : report.ok
        ? `<p class="ok">coven-ls ${escape(report.version)} is ready.</p>`
        : `<p class="error">coven-ls ${escape(report.version)} is not ready: fix the ✗ lines.</p>`;
  const rows = (report?.findings ?? [])
    .map(
      (f) =>
        `<tr class="${f.status}"><td class="mark">${MARK[f.status]}</td><td><b>${escape(f.title)}</b><br>${escape(f.found)}` +
        `${f.fix ? `<div class="fix">→ ${escape(f.fix)}</div>` : ''}</td></tr>`,
    )
    .join('\n');
  return `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline';">
<style>
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 0 1.5em; }
table { border-collapse: collapse; width: 100%; } td { padding: 0.5em; vertical-align: top; border-bottom: 1px solid var(--vscode-panel-border); }
.mark { font-size: 1.2em; width: 1.5em; } .ok .mark, p.ok { color: var(--vscode-testing-iconPassed); }
.warning .mark { color: var(--vscode-editorWarning-foreground); } .error .mark, p.error { color: var(--vscode-errorForeground); }
.fix { margin-top: 0.3em; } code { font-family: var(--vscode-editor-font-family); }
</style></head><body>
<h2>Coven: Check Setup</h2>
${verdict}
<table>${rows}</table>
<p>Checked by <code>${escape(server)} doctor --json</code>.</p>
</body></html>`;
}
