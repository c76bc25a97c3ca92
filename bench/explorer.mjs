// The explorer's screens timed in chromium (bench/explorer.py starts the server and reads the JSON line printed
// last): each screen from the click (or the token pasted) to its last byte drawn, ROUNDS times, each in a new tab.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'noop.js'));
const { chromium } = require('playwright-core');

const ROOT = process.env.ROOT_URL;
const TOKENS = JSON.parse(process.env.TOKENS);
const UNITS = JSON.parse(process.env.UNITS);
const ROUNDS = Number(process.env.ROUNDS || 3);
const ms = {};
const seen = {};
const timed = (name, value) => { (ms[name] = ms[name] || []).push(value); };

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'] });

const complete = (page, unit) => page.waitForFunction((u) => document.querySelector('#map-pane').dataset.complete === 'true'
  && document.querySelector('#map-pane').dataset.unit === u, unit, { timeout: 120000 });

// a new tab, the token pasted: the time to the tree's first item
async function start(token) {
  const context = await browser.newContext({ viewport: { width: 1360, height: 820 } });
  const page = await context.newPage();
  await page.goto(`${ROOT}/`);
  await page.fill('#token-input', token);
  const started = Date.now();
  await page.click('#token-form button[type=submit]');
  await page.locator('#tree [role=treeitem]').first().waitFor({ timeout: 60000 });
  return { context, page, started, tree: Date.now() - started };
}

async function map(page, unit) {
  const started = Date.now();
  await page.evaluate((u) => { location.hash = `unit=${u}`; }, unit);
  await complete(page, unit);
  return Date.now() - started;
}

for (let round = 0; round < ROUNDS; round += 1) {
  const national = await start(TOKENS.full);
  timed('first tree, national token', national.tree);
  timed('region map', await map(national.page, UNITS.region));
  seen['region map'] = await national.page.locator('#map-note').textContent();
  timed('country map', await map(national.page, UNITS.country));
  seen['country map'] = await national.page.locator('#map-note').textContent();
  let started = Date.now();
  await national.page.locator('#search').fill('centre');
  await national.page.waitForFunction(() => /by name/.test(document.querySelector('#results-note').textContent), null, { timeout: 60000 });
  timed('search "centre", counted', Date.now() - started);
  seen.search = await national.page.locator('#results-note').textContent();
  await national.context.close();

  const district = await start(TOKENS.district);
  timed('first tree, district token', district.tree);
  timed('district map, district token', await map(district.page, UNITS.district));
  await district.context.close();

  const below = await start(TOKENS.below);
  timed('first tree, partof:below token', below.tree);
  await complete(below.page, `group:${UNITS.district}`);
  timed('first screen, partof:below token', Date.now() - below.started);
  await below.context.close();

  const csps = await start(TOKENS.csps);
  timed('first tree, type=CSPS token', csps.tree);
  seen['type=CSPS token'] = await csps.page.locator('#tree-note').textContent();
  started = Date.now();
  await csps.page.locator('#tree > .group > .row > .label').first().click();
  await csps.page.waitForFunction(() => document.querySelector('#map-pane').dataset.complete === 'true', null, { timeout: 60000 });
  timed('a group of the type=CSPS token (map)', Date.now() - started);
  await csps.context.close();
}
await browser.close();
console.log(JSON.stringify({ ms, seen }));
