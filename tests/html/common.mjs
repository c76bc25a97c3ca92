// What the browser scripts of tests/html share: an axe-core audit of a screen and a part that records the step it
// stopped at (each part runs on its own: one that fails is recorded, the next ones still run).
import fs from 'node:fs';

// audit(page, screen): axe-core's violations of the given impacts, into found.violations; the screen into found.audited
export function auditor(require, found, impacts) {
  const AXE = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
  return async (page, screen) => {
    await page.evaluate(AXE);
    const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
    found.audited.push(screen);
    for (const v of result.violations) {
      if (impacts.includes(v.impact)) {
        found.violations.push({ screen, id: v.id, impact: v.impact, targets: v.nodes.slice(0, 3).map((x) => x.target.join(' ')),
          html: v.nodes.slice(0, 3).map((x) => x.html.slice(0, 160)), why: v.nodes[0].failureSummary.slice(0, 300) });
      }
    }
  };
}

// part(name, steps): the steps, or found.failed[name] = the error and the line of the script it came from
export function parts(found) {
  return async (name, steps) => {
    try { await steps(); } catch (error) {
      const at = (error.stack || '').split('\n').find((line) => line.includes('.mjs:')) || '';
      found.failed[name] = `${error.message.split('\n')[0]} ${at.trim()}`;
    }
  };
}
