'use strict';
// The bearer token of this tab: kept in sessionStorage only (never a URL, a cookie or a log), sent by fetch.
(function () {
  const KEY = 'orgunit-fhir.token';
  const Token = {
    get() {
      try { return sessionStorage.getItem(KEY); } catch (e) { return null; }
    },
    set(value) { sessionStorage.setItem(KEY, value); },
    forget() { sessionStorage.removeItem(KEY); },
    // "Forget token": the token and everything the pages kept in this tab beside it (orgunit-fhir.*)
    forgetAll() {
      for (const key of Object.keys(sessionStorage)) if (key.startsWith('orgunit-fhir.')) sessionStorage.removeItem(key);
    },
    headers(accept) {
      const headers = { Accept: accept };
      const token = Token.get();
      if (token) headers.Authorization = 'Bearer ' + token;
      return headers;
    },
    // #token-form: store the pasted token, then call onToken(); showError(text) shows a refusal
    wireForm(onToken) {
      const form = document.getElementById('token-form');
      if (!form || form.dataset.wired) return;
      form.dataset.wired = '1';
      form.addEventListener('submit', (event) => {
        event.preventDefault();
        const input = document.getElementById('token-input');
        const value = input.value.trim().replace(/^bearer\s+/i, '');
        if (!value) return;
        input.value = '';
        Token.set(value);
        Token.showState();
        onToken();
      });
    },
    showError(text) {
      const error = document.getElementById('token-error');
      if (!error) return;
      error.textContent = text;
      error.hidden = !text;
    },
    // the header's "token in this tab · forget it" control
    showState(onForget) {
      const state = document.getElementById('token-state');
      if (!state) return;
      if (onForget) state.dataset.forget = '1';
      state.replaceChildren();
      if (!Token.get()) return;
      const button = document.createElement('button');
      button.type = 'button';
      button.id = 'forget-token';
      button.textContent = 'Forget token';
      button.addEventListener('click', () => {
        Token.forgetAll();
        Token.showState();
        if (Token.onForget) Token.onForget(); else location.reload();
      });
      state.append('Token kept in this tab · ', button);
    },
    onForget: null,
  };
  window.OrgunitToken = Token;
})();
