// Parse Mermaid texts with the real Mermaid parser and print what it understood.
//
// Usage: node parse-mermaid.mjs < texts.json
// Input: a JSON array of Mermaid texts. Output: a JSON array with, for each text,
// {"ok": true, "type", "nodes": [{"id", "label", "shape"}], "edges": [{"start", "end", "label"}]}
// or {"ok": false, "error"}. Labels are decoded the way Mermaid draws them: <br> becomes
// a newline, other HTML tags (<b>) are dropped, and its entity codes (#35; #quot;) become
// characters.
//
// Mermaid needs a DOM even to parse (DOMPurify), so jsdom provides one.
import { readFileSync } from 'node:fs';
import { JSDOM } from 'jsdom';

const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import('mermaid');
mermaid.initialize({ startOnLoad: false });

function decode(text) {
  // Mermaid keeps "#35;" as an internal placeholder until rendering; a browser then
  // reads the resulting "&#35;" as "#".
  // Tags here are the renderer's own markup: a "<" of a name is still an entity code.
  const html = String(text ?? '')
    .replace(/<br\s*\/?>/gi, '\n')
    .replace(/<[^>]*>/g, '')
    .replace(/ﬂ°°(\d+)¶ß/g, '&#$1;')
    .replace(/ﬂ°(\w+)¶ß/g, '&$1;');
  const element = document.createElement('textarea');
  element.innerHTML = html;
  return element.value;
}

const texts = JSON.parse(readFileSync(0, 'utf8'));
const results = [];
for (const text of texts) {
  try {
    const parsed = await mermaid.parse(text);
    const diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
    const data = diagram.db.getData();
    results.push({
      ok: true,
      type: parsed.diagramType,
      nodes: data.nodes.map((n) => ({ id: n.id, label: decode(n.label), shape: n.shape })),
      edges: data.edges.map((e) => ({ start: e.start, end: e.end, label: decode(e.label) })),
    });
  } catch (error) {
    results.push({ ok: false, error: String(error?.message ?? error) });
  }
}
process.stdout.write(JSON.stringify(results));
