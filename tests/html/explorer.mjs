// Drives the explorer in Debian's chromium (playwright-core); prints one JSON line of findings for test_browser.py.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const { chromium } = require('playwright-core');

const ROOT = process.env.ROOT_URL;
const TOKEN = process.env.TOKEN;
const SHOTS = process.env.SHOTS;
const XSS = '<img src=x onerror=alert(1)>';
const found = { dialogs: [], cspViolations: [] };
const urls = []; // every request's URL, kept apart from the findings: a page may still ask after the last step

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});

function watch(page) {
  page.on('dialog', async (dialog) => { found.dialogs.push(dialog.message()); await dialog.dismiss(); });
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) found.cspViolations.push(message.text());
  });
  page.on('request', (request) => urls.push(request.url()));
  if (process.env.DEBUG) { page.on('pageerror', (e) => console.error('pageerror', e.message)); page.on('framenavigated', (f) => f === page.mainFrame() && console.error('nav', f.url())); }
}

const treeitem = (page, name) => page.locator('#tree [role=treeitem]').filter({
  has: page.locator(':scope > .row > .label', { hasText: new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`) }),
});

async function login(page) {
  await page.goto(ROOT + '/');
  await page.locator('#token-input').waitFor();
  await page.fill('#token-input', TOKEN);
  await page.click('#token-form button[type=submit]');
  await treeitem(page, 'République du Kénédougou').waitFor();
}

try {
  const context = await browser.newContext({ viewport: { width: 1360, height: 820 } });
  const page = await context.newPage();
  watch(page);
  await page.goto(ROOT + '/');
  await page.locator('#token-input').waitFor();
  await page.screenshot({ path: path.join(SHOTS, 'explorer-token.png') });
  await login(page);

  // the tree: a click expands the country, the keyboard the region, a click the district
  await treeitem(page, 'République du Kénédougou').locator(':scope > .row').click();
  await treeitem(page, 'Région des Hauts-Bassins').waitFor();
  await page.waitForFunction(() => document.querySelectorAll('#map path.child-boundary').length >= 2);
  found.countryChildBoundaries = await page.locator('#map path.child-boundary').count();
  await treeitem(page, 'République du Kénédougou').focus();
  for (let i = 0; i < 4; i += 1) {
    const focused = await page.evaluate(() => document.activeElement.querySelector(':scope > .row > .label')?.textContent);
    if (focused === 'Région des Hauts-Bassins') break;
    await page.keyboard.press('ArrowDown');
  }
  await page.keyboard.press('ArrowRight');
  await treeitem(page, 'District de Dandé').waitFor();
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Enter');
  await treeitem(page, 'CSPS Péni').waitFor();
  found.keyboardSelected = await page.locator('#unit-name').textContent();

  // the map of the district: its boundary and its children's points
  await page.waitForFunction(() => document.querySelectorAll('#map path.child-point').length >= 4);
  await page.waitForTimeout(300);
  found.childMarkers = await page.locator('#map path.child-point').count();
  found.selectedBoundaries = await page.locator('#map path.selected-boundary').count();
  await page.screenshot({ path: path.join(SHOTS, 'explorer.png') });

  // the XSS-named unit: text in the tree and the detail, never markup
  await treeitem(page, XSS).locator(':scope > .row').click();
  await page.waitForFunction((name) => document.querySelector('#unit-name')?.textContent === name, XSS);
  await page.locator('#map path.selected-point').hover();
  await page.waitForTimeout(300);
  found.xssShownAsText = (await treeitem(page, XSS).count()) === 1;
  found.xssImages = await page.locator('img[src="x"]').count();

  // find by name without its accents, with the keyboard; Enter right after typing (before the finder's 200 ms
  // pause) opens a result of what was typed, not one of the results still shown for the search before
  await page.locator('#search').fill('dande');
  await page.waitForFunction(() => /Dandé/.test(document.querySelector('#results [role=option] .label')?.textContent));
  await page.locator('#search').fill('csps peni');
  await page.locator('#search').press('ArrowDown');
  await page.locator('#search').press('Enter');
  await page.waitForFunction((xss) => document.querySelector('#unit-name')?.textContent !== xss, XSS);
  found.searchFound = await page.locator('#unit-name').textContent();
  await page.waitForFunction(() => document.querySelectorAll('.chain li').length >= 4);
  found.chain = await page.locator('.chain li').allTextContents();
  await page.locator('.versions tbody tr').nth(1).waitFor();
  found.historyRows = await page.locator('.versions tbody tr').count();
  found.aliases = await page.locator('#detail dd').allTextContents();
  await page.screenshot({ path: path.join(SHOTS, 'explorer-detail.png') });

  // the status filter alone lists the units
  await page.fill('#search', '');
  await page.selectOption('#status-filter', 'inactive');
  await page.waitForFunction(() => document.querySelector('#results .label')?.textContent === 'CSPS Fermé');
  found.inactiveFound = await page.locator('#results [role=option] .label').allTextContents();

  // the link to the unit's FHIR resource: the 401 page asks again with the tab's token
  await page.click('#detail a.fhir-html');
  await page.waitForFunction(() => document.body.dataset.status === '200');
  found.fhirPageHeading = await page.locator('#fhir h1').textContent();
  found.fhirPageHasName = (await page.locator('pre.json').textContent()).includes('"name": "CSPS Péni"');
  await page.screenshot({ path: path.join(SHOTS, 'fhir-page.png') });
  await page.click('#raw-json');
  await page.waitForURL(/^blob:/);
  found.rawJson = JSON.parse(await page.locator('body').textContent());
  await page.goBack();
  await page.locator('#forget-token').click();
  await page.locator('#token-form').waitFor();
  found.tokenForgotten = (await page.evaluate(() => sessionStorage.length)) === 0;

  // phone width: one column, nothing wider than the screen
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const small = await phone.newPage();
  watch(small);
  await login(small);
  await treeitem(small, 'République du Kénédougou').locator(':scope > .row').click();
  await treeitem(small, 'Région des Hauts-Bassins').waitFor();
  found.phoneOverflow = await small.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await small.screenshot({ path: path.join(SHOTS, 'explorer-phone.png') });

} finally {
  await browser.close();
}
// judged once the browser is closed: no request can come after the verdict
found.tokenNeverInUrl = urls.length > 0 && !urls.some((url) => url.includes(TOKEN));
console.log(JSON.stringify(found));
