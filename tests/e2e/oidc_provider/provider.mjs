// A real OpenID Connect provider for the single sign-on browser test: the certified
// `oidc-provider` package, with a directory of accounts read from a JSON file on every lookup
// (so the test changes a user's groups "at the provider" by rewriting the file) and a small
// login page that checks the account's password. Consent is granted for the one registered
// (first-party) client. PKCE is required. An account taken out of the directory is signed out
// at once, as a real provider disables one (its sessions end with it).
//
// Environment: PORT, ISSUER, DIRECTORY (path of the accounts file), CLIENT_ID, CLIENT_SECRET,
// REDIRECT_URI, POST_LOGOUT_REDIRECT_URI.
import { readFileSync } from "node:fs";
import http from "node:http";
import { parse as parseQuery } from "node:querystring";

import Provider, { interactionPolicy } from "oidc-provider";

const env = process.env;
const directory = () => JSON.parse(readFileSync(env.DIRECTORY, "utf8")).accounts;

// A session whose account left the directory must sign in again, so a silent re-check
// (prompt=none) is answered login_required; oidc-provider alone answered it server_error.
const { Check } = interactionPolicy;
const policy = interactionPolicy.base();
policy.get("login").checks.add(
  new Check("account_gone", "the account is no longer in the directory", "login_required", (ctx) => {
    const { accountId } = ctx.oidc.session;
    return accountId && !directory()[accountId] ? Check.REQUEST_PROMPT : Check.NO_NEED_TO_PROMPT;
  }),
);

const provider = new Provider(env.ISSUER, {
  clients: [
    {
      client_id: env.CLIENT_ID,
      client_secret: env.CLIENT_SECRET,
      redirect_uris: [env.REDIRECT_URI],
      post_logout_redirect_uris: [env.POST_LOGOUT_REDIRECT_URI],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_post",
    },
  ],
  pkce: { required: () => true },
  claims: {
    openid: ["sub"],
    email: ["email", "email_verified"],
    profile: ["preferred_username", "name", "given_name", "family_name"],
    groups: ["groups"],
  },
  cookies: { keys: ["test-only-cookie-key"] },
  features: { devInteractions: { enabled: false }, rpInitiatedLogout: { enabled: true } },
  interactions: { policy, url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(ctx, id) {
    const account = directory()[id];
    if (!account) return undefined;
    return {
      accountId: id,
      async claims() {
        const now = directory()[id] || account; // groups as the directory says now
        return {
          sub: id,
          email: now.email,
          email_verified: true,
          preferred_username: id,
          name: now.name,
          groups: now.groups,
        };
      },
    };
  },
});

const escape = (s) => String(s).replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);

function loginPage(uid, error) {
  return `<!doctype html><html><head><title>Test identity provider</title></head><body>
<h1>Test identity provider</h1>
${error ? `<p id="idp-error">${escape(error)}</p>` : ""}
<form method="post" action="/interaction/${uid}/login">
<label for="idp-login">Login</label> <input id="idp-login" name="login" autofocus>
<label for="idp-password">Password</label> <input id="idp-password" name="password" type="password">
<button type="submit">Sign in</button></form></body></html>`;
}

async function readBody(req) {
  let body = "";
  for await (const chunk of req) body += chunk;
  return parseQuery(body);
}

async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params } = details;
  if (prompt.name === "login") {
    if (action !== "login") {
      res.writeHead(200, { "Content-Type": "text/html" });
      return res.end(loginPage(uid));
    }
    const form = await readBody(req);
    const account = directory()[form.login];
    if (!account || account.password !== form.password) {
      res.writeHead(200, { "Content-Type": "text/html" });
      return res.end(loginPage(uid, "Wrong login or password."));
    }
    return provider.interactionFinished(req, res, { login: { accountId: form.login } });
  }
  // consent: the registered client is first-party, so grant what it asked for.
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(" "));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(" "));
  }
  const grantId = await grant.save();
  return provider.interactionFinished(
    req,
    res,
    { consent: { grantId } },
    { mergeWithLastSubmission: true },
  );
}

const callback = provider.callback();
const server = http.createServer(async (req, res) => {
  const match = req.url.match(/^\/interaction\/([^/?]+)(?:\/(login))?/);
  if (!match) return callback(req, res);
  try {
    await interaction(req, res, match[1], match[2]);
  } catch (error) {
    res.writeHead(500, { "Content-Type": "text/plain" });
    res.end(String(error));
  }
});
server.listen(Number(env.PORT), "127.0.0.1", () => {
  console.log(`oidc-provider listening on ${env.ISSUER}`);
});
