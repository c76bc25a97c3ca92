// The explorer as its users use it (issue 26), in Debian's chromium (playwright-core), with axe-core on every
// screen; prints one JSON line of findings for test_explorer_users.py.
import { createRequire } from 'node:module';
import path from 'node:path';

import { auditor, parts } from './common.mjs';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const { chromium } = require('playwright-core');

const ROOT = process.env.ROOT_URL;
const API = `${ROOT}/fhir`;
const FULL = process.env.TOKEN;
const SUB = process.env.SUB_TOKEN;
const IDS = JSON.parse(process.env.IDS); // bundle id -> server id
const SHOTS = process.env.SHOTS;
const found = { pageErrors: [], violations: [], audited: [], favicon: [], unauthorized: [], failed: {} };
const audit = auditor(require, found, ['critical', 'serious', 'moderate']);
const part = parts(found);
let requests = [];

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});

function watch(page) {
  page.on('pageerror', (error) => found.pageErrors.push(error.message));
  page.on('request', (request) => requests.push(request.url()));
  page.on('response', (response) => {
    if (/favicon/.test(response.url())) found.favicon.push(response.status());
    if (response.status() === 401) found.unauthorized.push(response.url());
  });
  if (process.env.DEBUG) page.on('console', (m) => console.error('console', m.text()));
}


const exact = (name) => new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`);
const treeitem = (page, name) => page.locator('#tree [role=treeitem]').filter({
  has: page.locator(':scope > .row > .label', { hasText: exact(name) }) });
const unitName = (page, name) => page.waitForFunction((n) => document.querySelector('#unit-name')?.textContent === n, name);
const chainOf = (page) => page.locator('.chain li').allTextContents();

async function login(page, token, url = ROOT + '/') {
  if (page.url() !== url) await page.goto(url);
  await page.locator('#token-input').waitFor();
  await page.fill('#token-input', token);
  await page.click('#token-form button[type=submit]');
  await page.locator('#tree [role=treeitem]').first().waitFor();
}

// each part runs on its own: one that fails (today's explorer) is recorded and the next ones still run

async function chainSettled(page, length) {
  await page.waitForFunction((n) => document.querySelectorAll('.chain li').length >= n, length);
  return chainOf(page);
}

try {
  await part('1', async () => {
    const context = await browser.newContext({ viewport: { width: 1360, height: 820 } });
    const page = await context.newPage();
    watch(page);
    await login(page, SUB, `${ROOT}/#unit=${IDS.diak01}`);
    found.subtreeRoots = await page.locator('#tree > [role=treeitem] > .row > .label').allTextContents();
    await unitName(page, 'CSPS Diakaba');
    found.subtreeChain = await chainSettled(page, 3);
    // the tree reveals the unit after its detail shows (its branch is read then): wait for the reveal, not a moment
    await page.locator('#tree [aria-selected=true] > .row > .label').first().waitFor();
    found.subtreeSelected = await page.locator('#tree [aria-selected=true] > .row > .label').allTextContents();
    await context.close();
  });

  const context = await browser.newContext({ viewport: { width: 1360, height: 820 } });
  const page = await context.newPage();
  watch(page);

  await part('8-login', async () => {
    await page.goto(ROOT + '/');
    await page.locator('#token-input').waitFor();
    await audit(page, 'login');
    await login(page, FULL);
    await audit(page, 'tree');
  });
  await part('6-tree', async () => {
    await treeitem(page, 'Pays des Collines').locator(':scope > .row').click();
    await treeitem(page, 'Région Nord').locator(':scope > .row').click();
    await treeitem(page, 'District de Kaya').locator(':scope > .row').click();
    await treeitem(page, 'CSPS Diakaba').waitFor();
    await page.waitForFunction(() => document.querySelectorAll('#tree .leaf').length >= 3);
    await page.waitForFunction(() => /^\d/.test(document.querySelector('#detail .children')?.textContent || ''));
    found.kayaChildren = await page.locator('#detail .children').textContent();
    found.leafHasArrow = await treeitem(page, 'CSPS Diakaba').evaluate((li) => li.hasAttribute('aria-expanded'));
    found.districtHasArrow = await treeitem(page, 'District de Ouahigouya').evaluate((li) => li.getAttribute('aria-expanded'));
    found.closedFlags = await treeitem(page, 'CSPS Fermé').locator(':scope > .row > .flag').allTextContents();
  });
  await part('3', async () => {
    await treeitem(page, 'CSPS Diakaba').locator(':scope > .row').click();
    await unitName(page, 'CSPS Diakaba');
    found.selectedHash = new URL(page.url()).hash;
    await page.locator('.versions tbody tr').first().waitFor();
    found.identifiers = await page.locator('#detail .identifier').allTextContents();
    found.openingDate = await page.locator('#detail dt:text-is("Opening date") + dd').textContent();
    found.version = await page.locator('#detail dt:text-is("Version") + dd').textContent();
    found.historyUpdated = await page.locator('.versions tbody tr td').nth(1).textContent();
    await page.waitForFunction(() => document.querySelectorAll('#map path.selected-point').length === 1);
    await audit(page, 'detail');
    await page.goBack();
    await unitName(page, 'District de Kaya');
    found.backShows = await page.locator('#unit-name').textContent();
    await page.goForward();
    await unitName(page, 'CSPS Diakaba');
    await page.reload();
    await unitName(page, 'CSPS Diakaba');
    await page.waitForFunction(() => document.querySelector('#tree [aria-selected=true] > .row > .label')?.textContent === 'CSPS Diakaba');
    found.reloadSelected = await page.locator('#tree [aria-selected=true] > .row > .label').allTextContents();
    const [tab] = await Promise.all([context.waitForEvent('page'),
      treeitem(page, 'CMA de Kaya').locator(':scope > .row > a.label').click({ modifiers: ['Control'] })]);
    watch(tab);
    await tab.waitForLoadState();
    found.ctrlClickHash = new URL(tab.url()).hash;
    if (await tab.locator('#token-input').isVisible()) await login(tab, FULL, tab.url());
    await unitName(tab, 'CMA de Kaya');
    found.ctrlClickShows = await tab.locator('#unit-name').textContent();
    await tab.close();
    found.stayedOn = await page.locator('#unit-name').textContent();
  });
  await part('4', async () => {
    const options = () => page.locator('#results [role=option]');
    await page.locator('#search').fill('diakaba');
    await page.waitForFunction(() => document.querySelector('#results .label')?.textContent === 'CSPS Diakaba');
    found.containsFound = await options().locator('.label').allTextContents();
    found.containsPath = await options().first().locator('.path').textContent();
    found.searchHash = new URL(page.url()).hash;
    await page.locator('#search').fill('tiebele');
    await page.waitForFunction(() => document.querySelectorAll('#results [role=option]').length === 20);
    found.firstPage = await options().count();
    found.pageNote = await page.locator('#results-note').textContent();
    await audit(page, 'search');
    await page.screenshot({ path: path.join(SHOTS, 'explorer-search.png') });
    await page.click('#more-results');
    await page.waitForFunction(() => document.querySelectorAll('#results [role=option]').length === 25);
    found.allPages = await options().locator('.label').allTextContents();
    found.moreHidden = await page.locator('#more-results').isHidden();
    await page.locator('#search').fill('diak01');
    await page.waitForFunction(() => /by code/.test(document.querySelector('#results-note')?.textContent));
    found.byCode = await options().first().locator('.label').textContent();
    await page.locator('#search').fill(IDS['kaya-cma']);
    await page.waitForFunction((id) => document.querySelector('#results [role=option]')?.dataset.id === id, IDS['kaya-cma']);
    found.byId = await options().first().locator('.label').textContent();
    await page.locator('#search').fill('tiebele 17');
    await page.waitForFunction(() => document.querySelector('#results .label')?.textContent === 'CSPS Sud-Tiébélé 17');
    await options().first().dispatchEvent('mousedown');
    await unitName(page, 'CSPS Sud-Tiébélé 17');
    await page.waitForFunction(() => document.querySelector('#tree [aria-selected=true] > .row > .label')?.textContent === 'CSPS Sud-Tiébélé 17');
    found.pickedRevealed = await treeitem(page, 'CSPS Sud-Tiébélé 17').isVisible();
    found.pickedFocused = await page.evaluate(() => document.activeElement?.querySelector(':scope > .row > .label')?.textContent);
  });
  await part('5', async () => {
    await page.locator('#search').fill('');
    await page.goto(`${ROOT}/#unit=${IDS.nord}`);
    await unitName(page, 'Région Nord');
    await page.waitForFunction((id) => document.querySelector('#map-pane').dataset.complete === 'true'
      && document.querySelector('#map-pane').dataset.unit === id, IDS.nord);
    found.regionPoints = Number(await page.locator('#map-pane').getAttribute('data-points'));
    found.regionLegend = await page.locator('#legend').textContent();
    found.regionLabels = await page.locator('#map .map-label').allTextContents();
    found.regionMap = await page.evaluate(() => ({ ...document.querySelector('#map-pane').dataset }));
    await page.goto(`${ROOT}/#unit=${IDS.sud}`);
    await unitName(page, 'Région Sud');
    await page.waitForFunction(() => document.querySelectorAll('#map path.child-boundary').length >= 1);
    await page.waitForTimeout(200);
    found.sudLabels = await page.locator('#map .map-label').allTextContents();
    found.sudLegend = await page.locator('#legend').textContent();
    await page.screenshot({ path: path.join(SHOTS, 'explorer-map.png') });
    await page.goto(`${ROOT}/#unit=${IDS.diak01}`);
    await unitName(page, 'CSPS Diakaba');
    await page.waitForFunction((id) => document.querySelector('#map-pane').dataset.complete === 'true'
      && document.querySelector('#map-pane').dataset.unit === id, IDS.diak01);
    found.facilityLegend = await page.locator('#legend').textContent();
  });
  await part('7', async () => {
    await page.goto(`${API}/Location/${IDS.diak01}/_history`);
    await page.waitForFunction(() => document.body.dataset.status === '200');
    await audit(page, 'history');
    await page.goto(`${API}/Location?_totalMethod=count&_count=2`);  // another server's control: a warning (an unknown filter is refused)
    await page.waitForFunction(() => document.body.dataset.status === '200');
    found.warningFirst = await page.evaluate(() => {
      const warning = document.querySelector('table.outcome tr.warning');
      const json = document.querySelector('pre.json');
      return Boolean(warning && json && (warning.compareDocumentPosition(json) & Node.DOCUMENT_POSITION_FOLLOWING));
  });
  found.entriesRows = await page.locator('table.entries tbody tr').count();
  await audit(page, 'fhir-page');
  await page.screenshot({ path: path.join(SHOTS, 'fhir-search-page.png') });

  });
  await part('2', async () => {
    await page.goto(`${ROOT}/#unit=${IDS.diak01}`);
    await unitName(page, 'CSPS Diakaba');
    found.fullChain = await chainSettled(page, 4);
    await page.locator('#forget-token').click();
    await page.locator('#token-form').waitFor();
    found.afterForget = await page.evaluate(() => ({
      tree: document.querySelectorAll('#tree li').length, detail: Boolean(document.querySelector('#unit-name')),
      results: document.querySelectorAll('#results li').length, paths: document.querySelectorAll('#map path').length,
      appHidden: document.getElementById('app').hidden }));
    found.hashAfterForget = new URL(page.url()).hash;
    requests = [];
    await login(page, SUB, page.url());
    found.rootsAfterNewToken = await page.locator('#tree > [role=treeitem] > .row > .label').allTextContents();
    found.openedAfterNewToken = Boolean(await page.locator('#unit-name').count());
    await page.goto(`${ROOT}/#unit=${IDS.diak01}`); // a link: the new token's own reads, not the cached chain
    await unitName(page, 'CSPS Diakaba');
    found.chainAfterNewToken = await chainSettled(page, 3);
    found.readsAfterNewToken = requests.filter((url) => url.startsWith(`${API}/Location/${IDS.diak01}`)).length;
  });
  await part('6-expiry', async () => {
    await page.locator('#search').fill('diakaba');
    await page.waitForFunction(() => document.querySelectorAll('#results [role=option]').length >= 1);
    await page.evaluate(() => sessionStorage.setItem('orgunit-fhir.token', 'expired'));
    await page.locator('#search').fill('diakab');
    await page.locator('#token-form').waitFor();
    found.expiredMessage = await page.locator('#token-error').textContent();
    await login(page, SUB, page.url());
    await unitName(page, 'CSPS Diakaba');
    await page.waitForFunction(() => document.querySelector('#tree [aria-selected=true] > .row > .label')?.textContent === 'CSPS Diakaba');
    await page.waitForFunction(() => document.querySelectorAll('#results [role=option]').length >= 1);
    found.restored = { search: await page.locator('#search').inputValue(), results: await page.locator('#results .label').allTextContents(),
      selected: await page.locator('#tree [aria-selected=true] > .row > .label').allTextContents() };
    await context.close();
  });
  await part('8-phone', async () => {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    const small = await phone.newPage();
    watch(small);
    await login(small, FULL, `${ROOT}/#unit=${IDS.kaya}`);
    await unitName(small, 'District de Kaya');
    await small.waitForFunction(() => document.querySelector('#tree [aria-selected=true]'));
    await small.waitForFunction(() => document.querySelector('#map-pane').dataset.complete === 'true'
      && Number(document.querySelector('#map-pane').dataset.points) >= 3);
    await audit(small, 'phone');
    found.phoneRowHeights = await small.evaluate(() => [...document.querySelectorAll('#tree .row')]
      .filter((row) => row.offsetParent).map((row) => Math.round(row.getBoundingClientRect().height)));
    found.phoneLayout = await small.evaluate(() => {
      const top = (id) => document.getElementById(id).getBoundingClientRect().top + window.scrollY;
      return { map: top('map-pane'), detail: top('detail'), screen: window.innerHeight,
        overflow: document.documentElement.scrollWidth - window.innerWidth };
  });
  await small.screenshot({ path: path.join(SHOTS, 'phone.png'), fullPage: true });
  await phone.close();
  });
} finally {
  await browser.close();
}
console.log(JSON.stringify(found));
