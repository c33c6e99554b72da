// A real OpenID provider (panva/oidc-provider, OpenID Certified) for the test suite.
// Configured from the environment by tests/oidc/conftest.py; prints "ready <port>" once
// it listens on 127.0.0.1. Its development sign-in accepts any login and password; the
// accounts below decide the claims.
import Provider from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};

const port = Number(env('OIDC_PORT'));
const issuer = `http://127.0.0.1:${port}`;

// login -> groups; anyone else signs in with no groups at all.
const GROUPS = { 'rita-sso': ['reviewers', 'staff'], 'ray-sso': ['reviewers'], 'olga-sso': ['staff'] };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: env('OIDC_CLIENT_ID'),
      client_secret: env('OIDC_CLIENT_SECRET'),
      redirect_uris: [env('OIDC_REDIRECT_URI')],
      post_logout_redirect_uris: [env('OIDC_POST_LOGOUT_URI')],
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'given_name', 'family_name'],
    groups: ['groups'],
  },
  scopes: ['openid', 'email', 'profile', 'groups'],
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

provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`ready ${port}\n`);
});
