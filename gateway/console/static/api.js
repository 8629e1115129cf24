// The console's API client (docs/console.md, "The console's API"). The CSRF token lives in
// this module's memory only: it is never written into the DOM or to storage.

let csrf = null;
let onSignedOut = () => {};

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `The gateway answered ${status}`);
    this.status = status;
    this.code = err.code || null;
    this.param = err.param || null;
    this.type = err.type || null;
  }
}

export function whenSignedOut(fn) {
  onSignedOut = fn;
}

export function setSession(answer) {
  csrf = answer && answer.csrf ? answer.csrf : null;
}

async function call(method, path, body, { signInCall = false, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    if (csrf) headers["X-CSRF-Token"] = csrf;
  }
  const init = { method, headers, credentials: "same-origin", cache: "no-store", signal };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch("/ui/api" + path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    const offline = new ApiError(0, { error: { message: "The gateway cannot be reached" } });
    offline.code = "network";
    throw offline;
  }
  let answer = null;
  const text = await response.text();
  if (text) {
    try {
      answer = JSON.parse(text);
    } catch {
      answer = null;
    }
  }
  if (!response.ok) {
    const err = new ApiError(response.status, answer);
    err.retryAfter = response.headers.get("Retry-After");
    // a 401 means the session ended (expiry, sign-out elsewhere, a new master key)
    if (response.status === 401 && !signInCall) {
      csrf = null;
      onSignedOut(err);
    }
    throw err;
  }
  return answer;
}

export const api = {
  session: () => call("GET", "/session", undefined, { signInCall: true }),
  signIn: (masterKey) => call("POST", "/session", { master_key: masterKey }, { signInCall: true }),
  signOut: () => call("DELETE", "/session"),
  overview: (signal) => call("GET", "/overview", undefined, { signal }),
  health: (signal) => call("GET", "/health", undefined, { signal }),
  keys: (signal) => call("GET", "/keys", undefined, { signal }),
  key: (id, signal) => call("GET", "/keys/" + encodeURIComponent(id), undefined, { signal }),
  createKey: (spec) => call("POST", "/keys", spec),
  revokeKey: (id) => call("DELETE", "/keys/" + encodeURIComponent(id)),
  spend: (signal) => call("GET", "/spend", undefined, { signal }),
  requests: (params, signal) => {
    const query = new URLSearchParams(params).toString();
    return call("GET", "/requests" + (query ? "?" + query : ""), undefined, { signal });
  },
  request: (id, signal) =>
    call("GET", "/requests/" + encodeURIComponent(id), undefined, { signal }),
  config: (signal) => call("GET", "/config", undefined, { signal }),
};
