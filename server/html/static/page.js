'use strict';
// A FHIR response page: with a token in this tab, a 401 page asks again with it (fetch, Authorization: Bearer)
// and shows the answer; links within the API are followed the same way; "raw JSON/XML" open the bytes.
(function () {
  const T = window.OrgunitToken;
  const api = new URL(document.body.dataset.api, location.href).pathname;

  function inApi(url) {
    return url.origin === location.origin && (url.pathname === api || url.pathname.startsWith(api + '/'));
  }

  async function load(href, push) {
    // no-store: the server's ETag names the version, not the format; a revalidated cached JSON would come back
    const response = await fetch(href, { headers: T.headers('text/html'), cache: 'no-store' });
    const doc = new DOMParser().parseFromString(await response.text(), 'text/html');
    const main = doc.getElementById('fhir');
    if (!main) return;
    if (response.status === 401 && T.get()) {
      T.forget();
      T.showState();
    }
    document.getElementById('fhir').replaceWith(document.importNode(main, true));
    document.title = doc.title;
    document.body.dataset.status = String(response.status);
    if (push) history.pushState(null, '', href);
    wire();
    if (response.status === 401) T.showError('The server refused this token (401): paste a valid one.');
  }

  async function openRaw(format) {
    const url = new URL(location.href);
    url.searchParams.set('_format', format);
    url.searchParams.set('_pretty', 'true');
    const response = await fetch(url, { headers: T.headers('*/*'), cache: 'no-store' });
    const type = format === 'xml' ? 'application/xml' : 'application/json';
    location.assign(URL.createObjectURL(new Blob([await response.arrayBuffer()], { type })));
  }

  function wire() {
    T.wireForm(() => load(location.href, false));
    for (const link of document.querySelectorAll('a[data-format]')) {
      link.addEventListener('click', (event) => {
        event.preventDefault();
        openRaw(link.dataset.format);
      });
    }
  }

  document.addEventListener('click', (event) => {
    const link = event.target.closest('a[href]');
    if (!link || link.dataset.format || !T.get() || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const url = new URL(link.href, location.href);
    if (!inApi(url)) return;
    event.preventDefault();
    load(url.href, true);
  });
  window.addEventListener('popstate', () => load(location.href, false));
  T.showState();
  wire();
  if (document.body.dataset.status === '401' && T.get()) load(location.href, false);
})();
