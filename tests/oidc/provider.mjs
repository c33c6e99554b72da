// A real OpenID provider (panva/oidc-provider, OpenID Certified) for the test suite.
// Configured from the environment by tests/oidc/support.py; prints "ready <port>" once
// it listens on 127.0.0.1. Its development sign-in accepts any login and password; the
// accounts below decide the claims.
//
// OIDC_SCOPES (optional, space-separated): the scopes it offers, and lists in its
// discovery document's scopes_supported; default "openid email profile groups". Without
// "groups", the groups claim comes with the profile scope instead, as many hosted
// providers do it. Either way it is strict: an authorization request for a scope it does
// not offer is answered with invalid_scope (oidc-provider itself ignores such scopes).
import Provider from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};

const port = Number(env('OIDC_PORT'));
const issuer = `http://127.0.0.1:${port}`;
const clientId = env('OIDC_CLIENT_ID');
const redirectUri = env('OIDC_REDIRECT_URI');
const scopes = (process.env.OIDC_SCOPES || 'openid email profile groups').split(' ').filter(Boolean);
const groupsScope = scopes.includes('groups');

// login -> groups; anyone else signs in with no groups at all.
const GROUPS = {
  'rita-sso': ['reviewers', 'staff'],
  'ray-sso': ['reviewers'],
  'olga-sso': ['staff'],
  'ada-sso': ['reviewers', 'billing'],
  // Decision rules' groups (tests/e2e/test_sso.py): who may decide an invoice.
  'bill-sso': ['reviewers', 'billing-approvers'],
  'lena-sso': ['reviewers', 'support-leads'],
};

const profile = ['preferred_username', 'given_name', 'family_name'];
const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: env('OIDC_CLIENT_SECRET'),
      redirect_uris: [redirectUri],
      post_logout_redirect_uris: [env('OIDC_POST_LOGOUT_URI')],
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    ...(groupsScope ? { profile, groups: ['groups'] } : { profile: [...profile, 'groups'] }),
  },
  scopes,
  // The claims of the scopes granted go into the ID token too, not only the userinfo
  // answer (as many hosted providers do it): an agent that sends a person's ID token on
  // their behalf (Countersign-On-Behalf-Of) carries their name, e-mail and groups.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: `${id}@example.test`,
          email_verified: true,
          preferred_username: id,
          given_name: id.split('-')[0],
          family_name: 'Example',
          groups: GROUPS[id] || [],
        };
      },
    };
  },
});
provider.proxy = false;

// A scope it does not offer: invalid_scope, sent back to the client's registered redirect
// URI with the state (RFC 6749, 4.1.2.1), as a strict provider answers.
provider.use(async (ctx, next) => {
  if (ctx.method === 'GET' && ctx.path === '/auth') {
    const asked = String(ctx.query.scope || '').split(' ').filter(Boolean);
    const unknown = asked.filter((scope) => !scopes.includes(scope));
    if (unknown.length && ctx.query.client_id === clientId && ctx.query.redirect_uri === redirectUri) {
      const answer = new URL(redirectUri);
      answer.searchParams.set('error', 'invalid_scope');
      answer.searchParams.set('error_description', `scope not offered: ${unknown.join(' ')}`);
      if (ctx.query.state) answer.searchParams.set('state', String(ctx.query.state));
      answer.searchParams.set('iss', issuer);
      ctx.redirect(answer.href);
      return;
    }
  }
  await next();
});

provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`ready ${port}\n`);
});
