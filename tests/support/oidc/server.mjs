// The tests' authorization server: oidc-provider (OpenID certified) issuing JWT access tokens with the
// client-credentials grant to confidential clients authenticating with private_key_jwt (SMART Backend Services).
// Started by tests/support/authserver.py: `node server.mjs CONFIG.json`. It listens on 127.0.0.1 (a free port),
// writes {issuer, port} to config.ready_file once it serves, and answers two test-only requests:
//   POST /__test/rotate        a new signing key signs from now on (the old ones stay published, unless ?drop=1)
//   GET  /__test/keys          the kids published, newest first
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';

import Provider, { errors } from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const ALG = config.alg ?? 'RS256';

function signingKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: ALG, use: 'sig' };
}

let keys = [signingKey()];
let provider;

function build(issuer) {
  const clients = new Map(config.clients.map((c) => [c.client_id, c]));
  const made = new Provider(issuer, {
    clients: config.clients.map((c) => ({
      client_id: c.client_id,
      token_endpoint_auth_method: 'private_key_jwt',
      token_endpoint_auth_signing_alg: c.assertion_alg,  // undefined: any of clientAuthSigningAlgValues
      jwks: c.jwks,
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      scope: c.scope,
    })),
    jwks: { keys },
    cookies: { keys: [randomUUID()] },
    ttl: { ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL ?? 300 },
    scopes: [...new Set(config.clients.flatMap((c) => c.scope.split(' ')))],
    enabledJWA: { clientAuthSigningAlgValues: ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'ES256', 'ES384'] },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      revocation: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async (ctx, client, oneOf) => oneOf ?? config.default_resource,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (ctx, indicator, client) => {
          const server = config.resources[indicator];
          if (!server) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
          return {
            scope: server.scope,
            audience: indicator,
            accessTokenFormat: 'jwt',
            accessTokenTTL: clients.get(client.clientId)?.ttl ?? server.ttl ?? 300,
            jwt: { sign: { alg: ALG } },
          };
        },
      },
    },
    extraTokenClaims: async (ctx, token) => clients.get(token.clientId)?.claims,
  });
  made.on('server_error', (ctx, err) => console.error('server_error', err));
  return made;
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1');
  if (url.pathname === '/__test/rotate' && req.method === 'POST') {
    keys = url.searchParams.get('drop') ? [signingKey()] : [signingKey(), ...keys];
    provider = build(provider.issuer);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kid: keys[0].kid }));
    return;
  }
  if (url.pathname === '/__test/keys') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(keys.map((k) => k.kid)));
    return;
  }
  provider.callback()(req, res);
});

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  provider = build(`http://127.0.0.1:${port}`);
  writeFileSync(config.ready_file, JSON.stringify({ issuer: provider.issuer, port }));
});

for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
