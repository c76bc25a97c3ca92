'use strict';
// The explorer's tree: the units the token sees, level by level ($children, sorted by name the way search folds
// names: accents and case ignored), each with the number of units below it ($counts?by=below: no arrow on a leaf).
// Its roots: the pyramid's, a subtree token's own, the `partof:below` unit of a query-scoped token (named as its
// units' partOf names it, though the token cannot open it), or, when the token's units are not one subtree
// (`?type=CSPS`), a list grouped by their parent ($counts?by=parent). A node or page that fails shows why, with a
// Retry that works once the server is back.
(function () {
  const O = window.Orgunit;
  const { el } = O;
  const PAGE = '100';
  const FLAT_ROOTS = 100; // more roots than this, under several parents: grouped by parent

  O.createTree = function createTree({ select, selectGroup, current }) {
    const tree = document.getElementById('tree');
    const note = document.getElementById('tree-note');
    const heading = document.getElementById('tree-label');

    function badge(count) {
      return el('span', { class: 'count', title: `${O.n(count)} unit${count === 1 ? '' : 's'} below`, text: O.n(count) });
    }

    function unitItem(unit, level) {
      const twisty = el('span', { class: 'twisty', 'aria-hidden': 'true' });
      const link = el('a', { href: `#unit=${encodeURIComponent(unit.id)}`, tabindex: '-1', class: 'label', text: unit.name || unit.id });
      const code = O.typeCode(unit);
      const row = el('div', { class: 'row' }, twisty, link, el('span', { class: 'meta', title: O.typeText(unit) || null, text: code || O.typeText(unit) }),
        ...O.flags(unit).map((flag) => el('span', { class: `flag ${flag}`, text: flag })));
      const gone = O.closed(unit) || unit.status === 'inactive';
      const item = el('li', { role: 'treeitem', 'aria-level': level, 'aria-expanded': 'false', 'aria-selected': 'false',
        tabindex: '-1', 'data-id': unit.id, class: `unknown${gone ? ' gone' : ''}` }, row); // unknown: children not known yet
      item.children$ = [`/Location/${encodeURIComponent(unit.id)}/$children`, [['_sort', 'name'], ['_count', PAGE]]];
      row.addEventListener('click', (event) => {
        if (event.ctrlKey || event.metaKey || event.shiftKey || event.button) return; // a new tab: the link's own
        event.preventDefault();
        focusItem(item);
        if (event.target === twisty) toggle(item);
        else { choose(item); expand(item); }
      });
      return item;
    }

    // a parent the token cannot open, named as its units' partOf names it: a group of them
    function groupItem(parentRef, count, level) {
      const id = O.refId(parentRef);
      const name = parentRef.display || parentRef.reference;
      const row = el('div', { class: 'row' }, el('span', { class: 'twisty', 'aria-hidden': 'true' }),
        el('span', { class: 'label', text: name }), el('span', { class: 'meta', text: 'not visible with this token' }), badge(count));
      const item = el('li', { role: 'treeitem', 'aria-level': level, 'aria-expanded': 'false', 'aria-selected': 'false',
        tabindex: '-1', 'data-group': id, 'data-name': name, class: 'group' }, row);
      item.children$ = ['/Location', [['partof', id], ['_sort', 'name'], ['_count', PAGE]]];
      row.addEventListener('click', (event) => {
        focusItem(item);
        if (event.target.classList.contains('twisty')) toggle(item);
        else { selectGroup(id, name, true); expand(item); }
      });
      return item;
    }

    function moreItem(load, level) {
      const item = el('li', { role: 'treeitem', class: 'more', 'aria-level': level, tabindex: '-1' },
        el('div', { class: 'row' }, el('span', { class: 'label', text: 'more…' })));
      item.loadMore = () => item.loading || (item.loading = load(item).finally(() => { item.loading = null; }));
      item.addEventListener('click', () => item.loadMore());
      return item;
    }

    function errorItem(error, retry, level) {
      const item = el('li', { role: 'treeitem', class: 'failed', 'aria-level': level, tabindex: '-1' },
        O.errorBox(error, retry));
      item.retry = retry;
      return item;
    }

    // one page of units: their items (and "more…"), their counts below
    async function loadPage(group, page, level, placeholder) {
      let bundle;
      try { bundle = await O.fhir(page[0], page[1]); } catch (error) {
        if (O.quiet(error)) throw error;
        const failed = errorItem(error, () => { failed.replaceWith(placeholder || ''); loadPage(group, page, level, placeholder).catch(() => {}); }, level);
        if (placeholder) placeholder.replaceWith(failed); else group.append(failed);
        throw error;
      }
      const found = O.entries(bundle);
      const items = found.map((unit) => unitItem(unit, level));
      const next = O.nextPage(bundle, page[0]);
      if (next) items.push(moreItem((more) => loadPage(group, next, level, more), level));
      if (placeholder) placeholder.replaceWith(...items); else group.append(...items);
      markCounts(items.filter((item) => item.dataset.id));
      return found.length;
    }

    // the number below each unit of a page (one $counts); a leaf gets no arrow; unknown (the count failed): the arrow
    // stays and expanding tells
    async function markCounts(items) {
      if (!items.length) return;
      let counted;
      try {
        counted = O.counts(await O.fhir('/Location/$counts', [['by', 'below'], ['_id', items.map((item) => item.dataset.id).join(',')]]));
      } catch (error) {
        for (const item of items) item.classList.remove('unknown');
        return;
      }
      const below = new Map(counted.groups.map((g) => [O.refId(g.unit), g.below]));
      for (const item of items) {
        item.classList.remove('unknown');
        const n = below.get(item.dataset.id);
        if (n === undefined) continue;
        item.querySelector(':scope > .row').append(badge(n));
        if (!n && item.getAttribute('aria-expanded') === 'false') {
          item.removeAttribute('aria-expanded');
          item.classList.add('leaf');
        }
      }
    }

    function rootsFailed(error) {
      note.replaceChildren(O.errorBox(error, () => { note.replaceChildren(); loadRoots(); }, 'The units could not be loaded'));
    }

    // how the roots the token sees lie: one page of their parents' groups decides the tree's shape
    async function loadRoots() {
      tree.replaceChildren();
      note.replaceChildren(el('span', { text: 'Loading…' }));
      heading.textContent = 'Pyramid';
      let grouped;
      try {
        grouped = O.counts(await O.fhir('/Location/$counts', [['by', 'parent'], ['partof:missing', 'true'], ['_count', PAGE]]));
      } catch (error) {
        if (!O.quiet(error)) rootsFailed(error);
        throw error;
      }
      note.replaceChildren();
      const groups = grouped.groups;
      const roots = ['/Location', [['partof:missing', 'true'], ['_sort', 'name'], ['_count', PAGE]]];
      if (!grouped.total) {
        tree.append(el('li', { class: 'note', text: 'No unit is visible with this token.' }));
        return;
      }
      if (groups.length === 1 && groups[0].parent && grouped.total > 1) {
        // every root under one parent the token cannot open (a scope `partof:below=X`): that parent as the root
        const item = groupItem(groups[0].parent, grouped.total, 1);
        tree.append(item);
        focusItem(item);
        await expand(item);
      } else if (grouped.total > FLAT_ROOTS && grouped.count > 1) {
        heading.textContent = 'Units by parent';
        note.textContent = `${O.n(grouped.total)} units under ${O.n(grouped.count)} parents, grouped by parent (the parents are not visible with this token).`;
        appendGroups(grouped, 0);
      } else {
        try { await loadPage(tree, roots, 1, null); } catch (error) {
          if (!O.quiet(error)) { tree.replaceChildren(); rootsFailed(error); }
          throw error;
        }
      }
      const first = tree.querySelector('[role=treeitem]');
      if (first && !tree.querySelector('[role=treeitem][tabindex="0"]')) first.tabIndex = 0;
    }

    // a group not among the pages shown (a unit opened by a link, a search): counted and shown before "more…"
    async function groupOf(parentRef) {
      const id = O.refId(parentRef);
      const counted = O.counts(await O.fhir('/Location/$counts', [['by', 'parent'], ['partof:missing', 'true'], ['partof', id]]));
      if (!counted.total) return null;
      const item = groupItem(parentRef, counted.total, 1);
      tree.insertBefore(item, tree.querySelector(':scope > .more'));
      return item;
    }

    function appendGroups(grouped, skip) {
      const shownAlready = (g) => tree.querySelector(`:scope > [data-group="${CSS.escape(O.refId(g.parent))}"]`); // opened before
      const items = grouped.groups.map((g) => (g.parent && !shownAlready(g) ? groupItem(g.parent, g.count, 1) : null)).filter(Boolean);
      const shown = skip + grouped.groups.length;
      if (shown < grouped.count) {
        items.push(moreItem(async (more) => {
          const next = O.counts(await O.fhir('/Location/$counts', [['by', 'parent'], ['partof:missing', 'true'], ['_count', PAGE], ['_skip', String(shown)]]));
          more.remove();
          appendGroups(next, shown);
        }, 1));
      }
      tree.append(...items);
    }

    function expand(item) {
      if (item.getAttribute('aria-expanded') !== 'false') return item.loading || Promise.resolve();
      item.setAttribute('aria-expanded', 'true');
      let group = item.querySelector(':scope > [role=group]');
      if (group && !group.querySelector(':scope > .failed')) { group.hidden = false; return Promise.resolve(); }
      if (group) group.remove();
      group = el('ul', { role: 'group' });
      item.append(group);
      item.classList.add('loading');
      const level = Number(item.getAttribute('aria-level')) + 1;
      item.loading = loadPage(group, item.children$, level, null).then((count) => {
        if (!count) { item.removeAttribute('aria-expanded'); item.classList.add('leaf'); group.remove(); }
      }).catch(() => {
        // the node's own error row (loadPage) says why; collapsed, a new expand or its Retry loads it again
        item.setAttribute('aria-expanded', 'true');
      }).finally(() => { item.classList.remove('loading'); item.loading = null; });
      return item.loading;
    }

    function collapse(item) {
      if (item.getAttribute('aria-expanded') !== 'true') return false;
      item.setAttribute('aria-expanded', 'false');
      const group = item.querySelector(':scope > [role=group]');
      if (group) group.hidden = true;
      return true;
    }

    function toggle(item) {
      if (!collapse(item)) expand(item);
    }

    function visible() {
      return [...tree.querySelectorAll('[role=treeitem]')].filter((item) => !item.parentElement.closest('[hidden]'));
    }

    function focusItem(item, scroll) {
      for (const other of tree.querySelectorAll('[role=treeitem][tabindex="0"]')) other.tabIndex = -1;
      item.tabIndex = 0;
      item.focus({ preventScroll: !scroll });
      if (scroll) item.scrollIntoView({ block: 'nearest' });
    }

    function markSelected(id, group) {
      for (const other of tree.querySelectorAll('[aria-selected=true]')) other.setAttribute('aria-selected', 'false');
      const item = (id && tree.querySelector(`[role=treeitem][data-id="${CSS.escape(id)}"]`))
        || (group && tree.querySelector(`[role=treeitem][data-group="${CSS.escape(group)}"]`));
      if (item) item.setAttribute('aria-selected', 'true');
      return item;
    }

    function choose(item) {
      if (item.classList.contains('more')) { item.loadMore(); return; }
      if (item.classList.contains('failed')) { item.retry(); return; }
      if (item.dataset.group) { selectGroup(item.dataset.group, item.dataset.name, true); return; }
      select(item.dataset.id, true);
    }

    // the item of `group` that `selector` names, its "more…" pages loaded as needed, `pages` at most (null: none)
    async function find(group, selector, mine, pages = 50) {
      for (let page = 0; page < pages && mine(); page += 1) {
        const item = group.querySelector(`:scope > [role=treeitem]${selector}`);
        const more = group.querySelector(':scope > .more');
        if (item || !more) return item;
        await more.loadMore().catch(() => {});
      }
      return null;
    }

    // the unit opened in the tree: its ancestors (`chain`, outermost first) expanded level by level, their "more…"
    // pages loaded as needed; under a parent the token cannot open, that group first
    async function reveal(chain, id, mine) {
      let group = tree;
      const top = chain[0] && O.refId(chain[0].partOf);
      if (top && tree.querySelector(':scope > .group')) { // under a parent the token cannot open: its group first
        const held = await find(tree, `[data-group="${CSS.escape(top)}"]`, mine, 3) || await groupOf(chain[0].partOf);
        if (!held || !mine()) return;
        await expand(held);
        group = held.querySelector(':scope > [role=group]');
      }
      for (const unit of chain) {
        const item = group && await find(group, `[data-id="${CSS.escape(unit.id)}"]`, mine);
        if (!item || !mine()) return;
        if (unit.id === id) { if (current() === id) markSelected(id); focusItem(item, true); return; }
        await expand(item);
        group = item.querySelector(':scope > [role=group]');
        if (!group) return;
      }
    }

    tree.addEventListener('keydown', (event) => {
      const item = event.target.closest('[role=treeitem]');
      if (!item || event.target.closest('button')) return;
      const items = visible();
      const index = items.indexOf(item);
      const parent = item.parentElement.closest('[role=treeitem]');
      const moves = {
        ArrowDown: () => items[index + 1] && focusItem(items[index + 1], true),
        ArrowUp: () => items[index - 1] && focusItem(items[index - 1], true),
        Home: () => focusItem(items[0], true),
        End: () => focusItem(items[items.length - 1], true),
        ArrowRight: () => (item.getAttribute('aria-expanded') === 'true'
          ? items[index + 1] && focusItem(items[index + 1], true) : item.hasAttribute('aria-expanded') && expand(item)),
        ArrowLeft: () => (collapse(item) || (parent && focusItem(parent, true))),
        Enter: () => { choose(item); if (item.dataset.id || item.dataset.group) expand(item); },
        ' ': () => choose(item),
      };
      if (moves[event.key]) { event.preventDefault(); moves[event.key](); }
    });

    return {
      loadRoots,
      reveal,
      markSelected,
      // the one root the token's units lie under, when it cannot open it (a scope `partof:below=X`)
      soleGroup() {
        const roots = tree.querySelectorAll(':scope > [role=treeitem]');
        return roots.length === 1 && roots[0].dataset.group ? { id: roots[0].dataset.group, name: roots[0].dataset.name } : null;
      },
      groupName(id) {
        const item = tree.querySelector(`[data-group="${CSS.escape(id)}"]`);
        return item ? item.dataset.name : null;
      },
      clear() { tree.replaceChildren(); note.replaceChildren(); heading.textContent = 'Pyramid'; },
    };
  };
})();
