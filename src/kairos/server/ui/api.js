// The page's only way to the server: same-origin fetches with the bearer token from sessionStorage (no cookies).

const TOKEN_KEY = "kairos.token";

/** Take a token passed as #token=… (kairos ui) into sessionStorage and drop it from the address bar. */
export function adoptToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + "#/chat");
  }
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra) {
  const out = { Accept: "application/json", ...extra };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) out.Authorization = `Bearer ${token}`;
  return out;
}

export class ApiError extends Error {
  constructor(status, message, type) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

/** JSON request; throws ApiError with the server's message (its `error.message`) on a non-2xx reply. */
export async function api(path, { method = "GET", body, signal, headers: extra } = {}) {
  const init = { method, signal, headers: headers(extra) };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { error: { message: text } };
  }
  if (!res.ok) {
    const err = (data && (data.error || data.detail)) || {};
    const message = typeof err === "string" ? err : err.message || `${res.status} ${res.statusText}`;
    if (res.status === 401) window.dispatchEvent(new CustomEvent("kairos:unauthorized"));
    throw new ApiError(res.status, message, err.type);
  }
  return data;
}

/** A binary resource (an image) as a Blob, with the bearer token; throws ApiError on a non-2xx reply. */
export async function fetchBlob(path, { signal } = {}) {
  const res = await fetch(path, { signal, headers: headers({ Accept: "*/*" }) });
  if (!res.ok) {
    if (res.status === 401) window.dispatchEvent(new CustomEvent("kairos:unauthorized"));
    throw new ApiError(res.status, `${res.status} ${res.statusText}`);
  }
  return res.blob();
}

/**
 * Follow a session's records (SSE over fetch, so the bearer header goes with it): calls onRecord(record)
 * for each `{cursor, session, type, data, at}`, reconnecting from the last cursor until `signal` aborts.
 * `after`: a cursor, "latest", or 0 for everything.
 */
export async function follow(sessionId, after, onRecord, signal, onState = () => {}) {
  let cursor = after;
  while (!signal.aborted) {
    try {
      const res = await fetch(`/v1/sessions/${encodeURIComponent(sessionId)}/events?after=${cursor}`, {
        headers: headers({ Accept: "text/event-stream" }),
        signal,
      });
      if (!res.ok) throw new ApiError(res.status, `stream: ${res.status}`);
      onState("live");
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, end);
          buf = buf.slice(end + 2);
          let data = "", event = "message";
          for (const line of frame.split("\n")) {
            if (line.startsWith("data: ")) data += line.slice(6);
            else if (line.startsWith("event: ")) event = line.slice(7);
          }
          if (!data || event !== "message") continue;
          const record = JSON.parse(data);
          cursor = record.cursor;
          onRecord(record);
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError && (e.status === 404 || e.status === 401)) {
        onState("closed");
        return;
      }
    }
    if (signal.aborted) return;
    onState("reconnecting");
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** base64url of a string's UTF-8 bytes (a token as a WebSocket subprotocol name). */
function b64url(text) {
  let bin = "";
  for (const b of new TextEncoder().encode(text)) bin += String.fromCharCode(b);
  return btoa(bin).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/**
 * A same-origin WebSocket for binary frames (array buffers). A browser cannot set its Authorization header,
 * so the token goes as a second subprotocol, `kairos.bearer.<base64url token>`; the server answers `protocol`.
 */
export function openSocket(path, protocol) {
  const url = new URL(path, location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const token = sessionStorage.getItem(TOKEN_KEY);
  const ws = new WebSocket(url, token ? [protocol, `kairos.bearer.${b64url(token)}`] : [protocol]);
  ws.binaryType = "arraybuffer";
  return ws;
}
