// The workbench: one script, no build step, no framework. Every text from the platform (answers, notes,
// pages, results, errors) is put on the page as text (textContent), never as markup; a call (a step's card, a
// tool's name anywhere) with its format characters escaped (`escaped`).
//
// Sign-in is OIDC's authorization code with PKCE at the issuer /workbench.json names. The access token is
// kept in this module's memory only (never in storage, a cookie or a URL), and sent only to this site's
// doors: a reload signs in again.

const $ = (id) => document.getElementById(id);
const SIGN_IN = "agentfn.sign-in"; // sessionStorage: the PKCE verifier and state across the issuer's page
const MAX_ASKS = 4; // approval rounds in a row for one message, as the CLI allows
const FORGET_ALL = "forget everything";

const state = { token: null, claims: null, agents: [], messages: [], busy: null, olderThan: null, grants: [], adminGroups: [] };

// --- small helpers --------------------------------------------------------------------------------------

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// Format characters (Unicode Cf: bidirectional overrides and isolates such as U+202E and U+2066-2069, zero-width
// characters, U+FEFF) drawn as their escapes, "\u202e": as they are, they reorder or hide what follows them, and the
// call a person approves could read as another. Only a call is drawn so: in an answer an emoji's joiner is text.
const FORMATS = /\p{Cf}/gu;
const hex = (n, width) => n.toString(16).padStart(width, "0");
const escaped = (text) => String(text).replace(FORMATS, (c) => {
  const n = c.codePointAt(0);
  return n > 0xffff ? `\\U${hex(n, 8)}` : `\\u${hex(n, 4)}`;
});

const short = (id) => String(id || "").slice(0, 8);
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
const day = (iso) => (iso ? new Date(iso).toLocaleDateString() : "");
const seconds = (ms) => `${((ms || 0) / 1000).toFixed(2)} s`;
const plural = (n, noun, nouns = `${noun}s`) => `${n} ${n === 1 ? noun : nouns}`;

function base64url(bytes) {
  return btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function randomString() {
  return base64url(crypto.getRandomValues(new Uint8Array(32)));
}

/** A problem (RFC 9457) as the page shows it: its title and detail, never a stack. */
class Problem extends Error {
  constructor(title, detail = "", status = 0) {
    super(title);
    this.title = title;
    this.detail = detail;
    this.status = status;
  }
}

function problemBox(problem) {
  return el("div", { class: "problem", role: "alert" }, el("strong", { text: problem.title }),
    problem.detail ? el("span", { text: problem.detail }) : null,
    problem.status === 401 ? el("button", { type: "button", text: "Sign in again", onclick: () => signOut() }) : null);
}

function notify(problem) {
  const notice = $("notice");
  notice.replaceChildren(...(problem ? [...problemBox(problem).childNodes] : []));
  notice.hidden = !problem;
}

async function asProblem(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    // a body that is not JSON: the status says enough
  }
  if (response.status === 401) {
    return new Problem("Your sign-in has ended", "sign in again to go on", 401);
  }
  return new Problem(String(body.title || response.statusText || "Error"), String(body.detail || ""), response.status);
}

/** A call to one of the platform's doors on this site, as the signed-in person. */
async function door(method, path, body) {
  const headers = { Authorization: `Bearer ${state.token}`, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    throw new Problem("The platform did not answer", "check the connection and try again");
  }
  if (!response.ok) throw await asProblem(response);
  return response.status === 204 ? null : response.json();
}

// --- sign-in ---------------------------------------------------------------------------------------------

async function settings() {
  const answer = await fetch("/workbench.json");
  if (!answer.ok) throw new Problem("The workbench's settings could not be read", `status ${answer.status}`);
  const found = await answer.json();
  const discovery = await fetch(`${found.issuer}/.well-known/openid-configuration`).catch(() => null);
  if (!discovery || !discovery.ok) {
    throw new Problem("The sign-in service did not answer", `${found.issuer} has no OIDC discovery document`);
  }
  return { ...found, discovery: await discovery.json() };
}

async function signIn(config) {
  const verifier = randomString();
  const challenge = base64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const pending = { verifier, state: randomString(), nonce: randomString() };
  sessionStorage.setItem(SIGN_IN, JSON.stringify(pending));
  const query = new URLSearchParams({
    response_type: "code", client_id: config.client_id, redirect_uri: redirectUri(), scope: config.scope,
    state: pending.state, nonce: pending.nonce, code_challenge: challenge, code_challenge_method: "S256",
  });
  location.assign(`${config.discovery.authorization_endpoint}?${query}`);
}

const redirectUri = () => `${location.origin}/`;

/** Back from the issuer: the code is exchanged for the token, and the address loses the code. */
async function finishSignIn(config, query) {
  const pending = JSON.parse(sessionStorage.getItem(SIGN_IN) || "null");
  sessionStorage.removeItem(SIGN_IN);
  history.replaceState(null, "", "/");
  if (query.get("error")) {
    throw new Problem("Sign-in was refused", `${query.get("error")}: ${query.get("error_description") || ""}`);
  }
  if (!pending || query.get("state") !== pending.state) {
    throw new Problem("Sign-in did not complete", "the answer does not belong to a sign-in started here; sign in again");
  }
  if (query.get("iss") && query.get("iss") !== config.discovery.issuer) {
    throw new Problem("Sign-in did not complete", "the answer came from another issuer");
  }
  const form = new URLSearchParams({
    grant_type: "authorization_code", code: query.get("code"), redirect_uri: redirectUri(),
    client_id: config.client_id, code_verifier: pending.verifier,
  });
  let response;
  try {
    response = await fetch(config.discovery.token_endpoint, { method: "POST", body: form });
  } catch {
    throw new Problem("The sign-in service did not answer", "try again");
  }
  const answer = await response.json().catch(() => ({}));
  if (!response.ok || !answer.access_token) {
    throw new Problem("Sign-in was refused", String(answer.error_description || answer.error || response.status));
  }
  return answer.access_token;
}

/** The token's claims, to say who is signed in (the doors verify the token; the page only reads it). */
function claimsOf(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(part), (c) => c.charCodeAt(0))));
  } catch {
    return {};
  }
}

function signOut() {
  state.token = null;
  state.claims = null;
  state.messages = [];
  $("transcript").replaceChildren();
  $("entries").replaceChildren();
  $("tools").replaceChildren();
  $("nav").hidden = true;
  $("who").hidden = true;
  $("nav-admin").hidden = true;
  show("signin");
}

// --- views -----------------------------------------------------------------------------------------------

const VIEWS = ["signin", "chat", "memory", "tools", "admin"];
const LOADERS = { memory: () => listEntries(), tools: () => listTools(), admin: () => loadAdmin() };

function show(view) {
  for (const name of VIEWS) $(`view-${name}`).hidden = name !== view;
  for (const button of $("nav").querySelectorAll("button")) {
    if (button.dataset.view === view) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  notify(null);
  if (LOADERS[view]) LOADERS[view]().catch(notify);
}

async function signedIn(token) {
  state.token = token;
  state.claims = claimsOf(token);
  const groups = Array.isArray(state.claims.groups) ? state.claims.groups : [];
  $("who-name").textContent = `${state.claims.sub || "?"}${groups.length ? ` (${groups.join(", ")})` : ""}`;
  $("who").hidden = false;
  $("nav").hidden = false;
  show("chat");
  await loadAgents();
  // The admin section exists for callers the platform lets read the audit; for others it is not there at all. Only a
  // person whose token names an admin group is asked about (anyone else would only be refused); the doors decide.
  $("nav-admin").hidden = true;
  if (groups.some((group) => state.adminGroups.includes(group))) {
    try {
      state.grants = (await door("GET", "/v1/admin/grants")).rows || [];
      $("nav-admin").hidden = false;
    } catch {
      // refused after all (the model function's admin groups differ): no admin section
    }
  }
  $("message").focus();
}

// --- chat ------------------------------------------------------------------------------------------------

async function loadAgents() {
  const found = (await door("GET", "/v1/agents")).agents || [];
  state.agents = found;
  const select = $("agent");
  select.replaceChildren(...found.map((a) => el("option", { value: a.name, text: a.name })));
  if (!found.length) {
    $("agent-about").textContent = "No agent is granted to you.";
    $("send").disabled = true;
    return;
  }
  $("send").disabled = false;
  describeAgent();
}

function describeAgent() {
  const agent = state.agents.find((a) => a.name === $("agent").value);
  $("agent-about").textContent = agent ? `${agent.brief || ""} Tools: ${escaped((agent.tools || []).join(", ")) || "none"}.` : "";
}

function changeAgent() {
  // A conversation belongs to one agent: another agent starts a fresh one.
  state.messages = [];
  $("transcript").replaceChildren();
  describeAgent();
}

/** The events of a turn's stream (SSE), each as [name, data], as they arrive. */
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield [name, JSON.parse(data.join("\n"))];
    }
  }
}

function stepCard(step) {
  const card = el("li", { class: "card", "data-status": step.status, "data-step": step.n });
  drawStep(card, step);
  return card;
}

function drawStep(card, step) {
  card.dataset.status = step.status;
  const label = { started: "running", ok: "ok", error: "problem", needs_approval: "needs your approval", declined: "declined" };
  const header = el("header", {}, el("strong", { text: `step ${step.n} · ${escaped(step.tool)}` }),
    el("span", { class: "status", text: label[step.status] || step.status }),
    step.ms !== undefined && step.status !== "started" ? el("span", { class: "dim", text: `${step.ms} ms` }) : null);
  const parts = [header, el("pre", { text: escaped(JSON.stringify(step.arguments ?? {}, null, 1)) })];
  if (step.note) {
    // forget: the note it deletes, beside its id, so the person approves a note and not an id
    parts.push(el("p", { class: "note", "aria-label": "The note" }, el("span", { class: "kind", text: escaped(step.note.kind || "note") }),
      " ", el("span", { text: escaped(step.note.text) })));
  }
  if (step.result !== undefined) {
    const result = step.result;
    const text = result && typeof result === "object" && result.title
      ? `${result.title}${result.detail ? `: ${result.detail}` : ""}` : JSON.stringify(result, null, 1);
    parts.push(el("details", {}, el("summary", { text: "result" }), el("pre", { text: escaped(text) })));
  }
  card.replaceChildren(...parts);
}

function recalledPanel(entries, cited) {
  const list = el("ol");
  for (const entry of entries) {
    const isCited = cited.includes(entry.id);
    list.append(el("li", { "data-id": entry.id, "data-cited": isCited ? "true" : "false" },
      isCited ? el("span", { class: "cited", title: "cited in the answer", text: "✓ cited " }) : null,
      el("span", { class: "kind", text: entry.kind }), " ",
      entry.kind === "episode" ? el("span", { class: "dim", text: `${entry.date || day(entry.created_at)} ` }) : null,
      el("span", { text: entry.text }),
      el("span", { class: "dim", text: ` · ${entry.source || ""}${entry.similarity ? ` · ${entry.similarity.toFixed(2)}` : ""}` })));
  }
  return el("aside", { class: "recalled", "aria-label": "Recalled for this turn" }, el("h4", { text: "Recalled" }), list);
}

/** One request of a turn, drawn into `reply` as it streams; resolves to {answer, pending, done}. */
async function playTurn(reply, conversation, approvals) {
  const steps = el("ol", { class: "steps", "aria-label": "Steps" });
  const answer = el("p", { class: "answer", "aria-live": "polite" });
  const meta = el("p", { class: "meta" });
  reply.replaceChildren(steps, answer, meta);
  const agent = $("agent").value;
  const controller = new AbortController();
  state.busy = controller;
  const body = { messages: conversation, ...(approvals ? { approvals } : {}) };
  let response;
  try {
    response = await fetch(`/v1/agents/${encodeURIComponent(agent)}/turns`, {
      method: "POST", signal: controller.signal, body: JSON.stringify(body),
      headers: { Authorization: `Bearer ${state.token}`, "Content-Type": "application/json", Accept: "text/event-stream" },
    });
  } catch {
    throw new Problem("The platform did not answer", "check the connection and try again");
  }
  if (!response.ok) {
    const problem = await asProblem(response);
    problem.refused = true; // refused before it ran: the message is not part of the conversation
    throw problem;
  }
  const cards = new Map();
  const asked = new Map();
  let recalled = { entries: [] };
  let text = "";
  try {
    for await (const [name, data] of events(response)) {
      if (name === "recall") {
        recalled = data;
      } else if (name === "step") {
        if (cards.has(data.n)) drawStep(cards.get(data.n), data);
        else {
          cards.set(data.n, stepCard(data));
          steps.append(cards.get(data.n));
        }
        if (data.status === "needs_approval") asked.set(data.n, data);
      } else if (name === "delta") {
        text += data.text || "";
        answer.textContent = text;
      } else if (name === "error") {
        throw new Problem(String(data.title || "Error"), String(data.detail || ""), data.status);
      } else if (name === "done") {
        const usage = data.usage || {};
        const timing = data.timing || {};
        meta.textContent = [`${usage.tokens_in || 0} in / ${usage.tokens_out || 0} out tokens`,
          plural(usage.rounds || 0, "round"), plural(data.steps || 0, "step"),
          `${seconds(timing.ms)} (engine ${seconds(timing.engine_ms)}, tools ${seconds(timing.tools_ms)})`].join(" · ");
        if (recalled.unavailable) {
          reply.append(el("aside", { class: "recalled", text: "Memory did not answer: nothing was recalled." }));
        } else if ((recalled.entries || []).length) {
          reply.append(recalledPanel(recalled.entries, data.cited || []));
        }
        if (!text) answer.remove();
        const pending = (data.pending || []).filter((n) => asked.has(n)).map((n) => ({ step: asked.get(n), card: cards.get(n) }));
        return { answer: text, pending };
      }
    }
  } catch (error) {
    if (error.name === "AbortError") throw new Problem("Answer stopped", "the turn was cancelled");
    throw error instanceof Problem ? error : new Problem("The answer broke off", "the stream ended early");
  } finally {
    state.busy = null;
  }
  throw new Problem("The answer broke off", "the stream ended before the turn did");
}

/** Approve or Deny on each card awaiting the person; resolves when every one is answered. */
function askApprovals(pending) {
  return new Promise((resolve) => {
    const answers = new Map();
    for (const { step, card } of pending) {
      const settle = (approve) => {
        answers.set(step.n, { token: step.approval, approve });
        ask.replaceChildren(el("span", { class: "status", text: approve ? "approved" : "denied" }));
        if (answers.size === pending.length) resolve(pending.map(({ step: s }) => answers.get(s.n)));
      };
      const ask = el("div", { class: "ask" }, el("span", { text: "Run this call?" }),
        el("button", { type: "button", class: "primary", onclick: () => settle(true), text: "Approve" }),
        el("button", { type: "button", onclick: () => settle(false), text: "Deny" }));
      card.append(ask);
    }
    // The first card has the focus, not Approve: the person reads the call before answering, and an Enter meant
    // for something else answers nothing (Approve and Deny are a Tab away).
    for (const { card } of pending) card.tabIndex = -1;
    pending[0].card.focus();
  });
}

async function say(text) {
  const conversation = [...state.messages, { role: "user", content: text }];
  const turn = el("li", { class: "turn" }, el("div", { class: "you", text }));
  $("transcript").append(turn);
  setBusy(true);
  let approvals = null;
  try {
    for (let asks = 0; asks <= MAX_ASKS; asks += 1) {
      const reply = el("div", { class: "reply" });
      turn.append(reply);
      reply.scrollIntoView({ block: "end" });
      let result;
      try {
        result = await playTurn(reply, conversation, approvals);
      } catch (problem) {
        reply.append(problemBox(problem));
        if (!problem.refused && problem.title !== "Answer stopped") state.messages = conversation;
        return;
      }
      if (!result.pending.length) {
        state.messages = [...conversation, ...(result.answer.trim() ? [{ role: "assistant", content: result.answer }] : [])];
        return;
      }
      setBusy(false, true);
      // The next request resends `conversation` unchanged: an approval runs only in the conversation that asked.
      approvals = await askApprovals(result.pending);
      setBusy(true);
    }
    turn.append(problemBox(new Problem("The agent asked for approval too many times", "send your message again to go on")));
    state.messages = conversation;
  } finally {
    setBusy(false);
  }
}

function setBusy(busy, waiting = false) {
  $("send").disabled = busy || waiting;
  $("message").disabled = busy || waiting;
  $("end").disabled = busy || waiting;
  $("agent").disabled = busy || waiting;
  $("stop").hidden = !busy;
  if (!busy && !waiting) $("message").focus();
}

async function endSession() {
  const messages = [...state.messages];
  while (messages.length && messages[messages.length - 1].role !== "user") messages.pop();
  if (!messages.length) {
    notify(new Problem("Nothing to end yet", "say something first"));
    return;
  }
  setBusy(true);
  $("stop").hidden = true;
  const item = el("li", { class: "turn" });
  $("transcript").append(item);
  try {
    const { episode } = await door("POST", `/v1/agents/${encodeURIComponent($("agent").value)}/sessions/end`, { messages });
    item.append(el("article", { class: "card episode", "data-status": "ok", "aria-label": "Episode kept" },
      el("header", {}, el("strong", { text: "Episode kept" }), el("span", { class: "dim", text: `${short(episode.id)} · ${when(episode.created_at)}` })),
      el("p", { class: "answer", text: episode.text }),
      el("p", { class: "meta", text: `${episode.kind} · ${episode.source || ""}` })));
    state.messages = [];
    item.append(el("p", { class: "meta", text: "A fresh conversation starts." }));
  } catch (problem) {
    item.append(el("article", { class: "card", "data-status": "error", "aria-label": "No episode kept" },
      el("header", {}, el("strong", { text: "No episode kept" })), problemBox(problem)));
  } finally {
    setBusy(false);
  }
}

// --- memory ----------------------------------------------------------------------------------------------

async function listEntries() {
  const kind = $("kind-filter").value;
  const found = (await door("GET", `/v1/entries${kind ? `?kind=${encodeURIComponent(kind)}` : ""}`)).entries || [];
  $("entries-title").textContent = `Entries (${found.length})`;
  $("entries").replaceChildren(...found.map(entryItem));
  if (!found.length) $("entries").append(el("li", { class: "dim", text: "Nothing kept." }));
}

function entryItem(entry) {
  const item = el("li", { "data-id": entry.id });
  const facts = el("div", { class: "facts" },
    el("span", { class: "kind", text: entry.kind }), el("span", { text: `source: ${entry.source || "—"}` }),
    el("span", { text: `kept ${when(entry.created_at)}` }),
    entry.updated_at && entry.updated_at !== entry.created_at ? el("span", { text: `corrected ${when(entry.updated_at)}` }) : null,
    entry.similarity !== undefined ? el("span", { text: `similarity ${entry.similarity.toFixed(2)}` }) : null,
    el("span", { text: `id ${short(entry.id)}` }));
  const actions = el("div", { class: "actions" },
    el("button", { type: "button", text: "Correct", onclick: () => correct(item, entry) }),
    el("button", { type: "button", text: "Forget", onclick: () => confirmForget(item, entry, actions) }));
  item.append(el("p", { class: "text", text: entry.text }), facts, actions);
  return item;
}

function correct(item, entry) {
  const id = short(entry.id);
  const text = el("textarea", { id: `text-${id}`, rows: 3, required: true, maxlength: 2000 });
  text.value = entry.text;
  const source = el("input", { id: `source-${id}`, required: true, maxlength: 200 });
  source.value = entry.source || "";
  const form = el("form", {},
    el("label", { for: `text-${id}`, text: "Text" }), text, el("label", { for: `source-${id}`, text: "Source" }), source,
    el("div", { class: "actions" }, el("button", { type: "submit", class: "primary", text: "Save" }),
      el("button", { type: "button", text: "Cancel", onclick: () => item.replaceWith(entryItem(entry)) })));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const change = {};
    if (text.value !== entry.text) change.text = text.value;
    if (source.value !== (entry.source || "")) change.source = source.value;
    if (!Object.keys(change).length) {
      item.replaceWith(entryItem(entry));
      return;
    }
    try {
      const updated = await door("PATCH", `/v1/entries/${encodeURIComponent(entry.id)}`, change);
      const fresh = entryItem(updated);
      item.replaceWith(fresh);
      fresh.querySelector("button").focus();
      notify(null);
    } catch (problem) {
      notify(problem);
    }
  });
  item.querySelector(".actions").replaceWith(form);
  text.focus();
}

function confirmForget(item, entry, actions) {
  const keep = () => confirmation.replaceWith(actions);
  const confirmation = el("div", { class: "actions", role: "group", "aria-label": "Confirm forgetting" },
    el("span", { text: "Forget this entry for good?" }),
    el("button", { type: "button", class: "danger", text: "Yes, forget it", onclick: async () => {
      try {
        await door("DELETE", `/v1/entries/${encodeURIComponent(entry.id)}`);
        item.replaceWith(el("li", { class: "dim", role: "status", text: `Forgotten: ${short(entry.id)}` }));
        notify(null);
      } catch (problem) {
        notify(problem);
        keep();
      }
    } }),
    el("button", { type: "button", text: "Keep it", onclick: keep }));
  actions.replaceWith(confirmation);
  confirmation.querySelector("button.danger").focus();
}

async function addEntry(event) {
  event.preventDefault();
  try {
    await door("POST", "/v1/entries", { kind: $("add-kind").value, text: $("add-text").value, source: $("add-source").value });
    $("add-text").value = "";
    notify(null);
    await listEntries();
  } catch (problem) {
    notify(problem);
  }
}

async function search(event) {
  event.preventDefault();
  try {
    const found = await door("POST", "/v1/recall", { query: $("search-query").value });
    $("entries-title").textContent = `Recalled for “${$("search-query").value}” (${found.entries.length}, similarity ≥ ${found.threshold})`;
    $("entries").replaceChildren(...found.entries.map(entryItem));
    if (!found.entries.length) $("entries").append(el("li", { class: "dim", text: "Recall finds nothing for this." }));
    notify(null);
  } catch (problem) {
    notify(problem);
  }
}

async function forgetAll(event) {
  event.preventDefault();
  if ($("forget-all-confirm").value !== FORGET_ALL) return;
  try {
    const receipt = await door("DELETE", "/v1/entries", { confirm: FORGET_ALL });
    const counts = Object.entries(receipt.deleted || {}).map(([kind, n]) => `${kind} ${n}`).join(", ");
    $("receipt").textContent = `Deleted ${plural(receipt.total || 0, "entry", "entries")} (${counts}) at ${when(receipt.at)}.`;
    // What stays of the person after it, and why: the platform's own words, shown as text.
    $("stays").replaceChildren(
      ...(receipt.stays || []).map((item) =>
        el("li", {}, el("code", { text: item.record }), ` ${item.holds}. `, el("span", { class: "dim", text: `${item.why}; ${item.until}.` })),
      ),
    );
    $("stays-title").hidden = !(receipt.stays || []).length;
    $("forget-all-confirm").value = "";
    $("forget-all-button").disabled = true;
    notify(null);
    await listEntries();
  } catch (problem) {
    notify(problem);
  }
}

// --- tools -----------------------------------------------------------------------------------------------

async function listTools() {
  const found = (await door("GET", "/v1/tools")).tools || [];
  $("tools").replaceChildren(...found.map(toolForm));
  if (!found.length) $("tools").append(el("p", { class: "dim", text: "No tool is open to you on its own." }));
}

/** A form built from the tool's JSON Schema: one field per property, by its type. */
function toolForm(tool) {
  const schema = tool.input_schema || {};
  const required = new Set(schema.required || []);
  const fields = Object.entries(schema.properties || {}).map(([name, property]) => field(tool.name, name, property, required.has(name)));
  const result = el("div", { "aria-live": "polite" });
  const form = el("form", {}, ...fields.map((f) => f.node), el("div", {}, el("button", { type: "submit", class: "primary", text: `Call ${escaped(tool.name)}` })));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const args = {};
    try {
      for (const f of fields) {
        const value = f.value();
        if (value !== undefined) args[f.name] = value;
      }
      const answer = await door("POST", `/v1/tools/${encodeURIComponent(tool.name)}/call`, { arguments: args });
      result.replaceChildren(el("pre", { class: "result", text: JSON.stringify(answer.content, null, 2) }));
    } catch (problem) {
      result.replaceChildren(problemBox(problem instanceof Problem ? problem : new Problem("Not sent", problem.message)));
    }
  });
  return el("article", { class: "tool", "data-tool": tool.name }, el("h3", { text: escaped(tool.name) }),
    el("p", { class: "dim", text: tool.description || "" }), form, result);
}

function field(tool, name, property, isRequired) {
  const id = `tool-${tool}-${name}`;
  const type = Array.isArray(property.type) ? property.type.find((t) => t !== "null") : property.type;
  const hint = [property.description, property.minimum !== undefined ? `at least ${property.minimum}` : null,
    property.maximum !== undefined ? `at most ${property.maximum}` : null].filter(Boolean).join("; ");
  let control;
  let read;
  if (Array.isArray(property.enum)) {
    control = el("select", { id }, isRequired ? null : el("option", { value: "", text: "(any)" }),
      ...property.enum.map((v) => el("option", { value: JSON.stringify(v), text: String(v) })));
    read = () => (control.value === "" ? undefined : JSON.parse(control.value));
  } else if (type === "boolean") {
    control = el("select", { id }, isRequired ? null : el("option", { value: "", text: "(any)" }),
      el("option", { value: "true", text: "yes" }), el("option", { value: "false", text: "no" }));
    read = () => (control.value === "" ? undefined : control.value === "true");
  } else if (type === "integer" || type === "number") {
    control = el("input", { id, type: "number", step: type === "integer" ? "1" : "any", min: property.minimum, max: property.maximum, required: isRequired });
    read = () => (control.value === "" ? undefined : Number(control.value));
  } else if (type === "string") {
    control = el("input", { id, maxlength: property.maxLength, required: isRequired });
    read = () => (control.value === "" ? undefined : control.value);
  } else {
    control = el("textarea", { id, rows: 2, placeholder: "JSON", required: isRequired });
    read = () => {
      if (control.value.trim() === "") return undefined;
      try {
        return JSON.parse(control.value);
      } catch {
        throw new Problem(`${name} is not JSON`, "write the value as JSON");
      }
    };
  }
  const node = el("div", { class: "field" }, el("label", { for: id, text: `${escaped(name)}${isRequired ? " (required)" : ""}` }), control,
    hint ? el("span", { class: "hint", text: hint }) : null);
  return { name, node, value: read };
}

// --- admin -----------------------------------------------------------------------------------------------

function table(node, columns, rows) {
  const head = el("thead", {}, el("tr", {}, ...columns.map(([, title]) => el("th", { scope: "col", text: title }))));
  const body = el("tbody", {}, ...rows.map((row) => el("tr", {}, ...columns.map(([key]) => el("td", { text: cell(row[key]) })))));
  node.replaceChildren(head, body);
}

function cell(value) {
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) return value.map(cell).join(", ");
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

async function loadAdmin() {
  state.grants = (await door("GET", "/v1/admin/grants")).rows || [];
  drawGrants();
  state.olderThan = null;
  $("generations").replaceChildren();
  await moreGenerations();
}

function drawGrants() {
  const query = $("grants-filter").value.trim().toLowerCase();
  const rows = state.grants.filter((row) => !query || Object.values(row).map(cell).join(" ").toLowerCase().includes(query));
  const keys = [...new Set(state.grants.flatMap((row) => Object.keys(row)))];
  table($("grants"), keys.map((k) => [k, k.replace(/_/g, " ")]), rows);
}

const GENERATION_COLUMNS = [["started", "time"], ["subject_hash", "subject"], ["agent", "agent"], ["kind", "kind"],
  ["channel", "channel"], ["tools", "tools"], ["status", "status"], ["tokens", "tokens in/out"], ["duration", "time taken"]];

async function moreGenerations() {
  const query = new URLSearchParams({ limit: "50", ...(state.olderThan ? { before: state.olderThan } : {}) });
  const found = (await door("GET", `/v1/admin/generations?${query}`)).generations || [];
  const rows = found.map((g) => ({ ...g, started: when(g.started_at),
    tools: (g.tools || []).map((t) => `${escaped(t.tool)} ${t.status} ${t.ms} ms`),
    tokens: `${g.tokens_in}/${g.tokens_out}`, duration: g.duration_ms === null ? "running" : seconds(g.duration_ms) }));
  const existing = $("generations").querySelector("tbody");
  if (!existing) table($("generations"), GENERATION_COLUMNS, rows);
  else existing.append(...rows.map((row) => el("tr", {}, ...GENERATION_COLUMNS.map(([key]) => el("td", { text: cell(row[key]) })))));
  if (found.length) state.olderThan = found[found.length - 1].started_at;
  $("generations-more").hidden = found.length < 50;
}

// --- start -----------------------------------------------------------------------------------------------

async function start() {
  $("nav").addEventListener("click", (event) => {
    const view = event.target.closest("button")?.dataset.view;
    if (view) show(view);
  });
  $("sign-out").addEventListener("click", signOut);
  $("agent").addEventListener("change", changeAgent);
  $("say").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("message").value.trim();
    if (!text || state.busy) return;
    $("message").value = "";
    say(text);
  });
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("say").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => state.busy?.abort());
  $("end").addEventListener("click", endSession);
  $("memory-add").addEventListener("submit", addEntry);
  $("memory-search").addEventListener("submit", search);
  $("kind-filter").addEventListener("change", () => listEntries().catch(notify));
  $("forget-all-confirm").addEventListener("input", () => {
    $("forget-all-button").disabled = $("forget-all-confirm").value !== FORGET_ALL;
  });
  $("forget-all").addEventListener("submit", forgetAll);
  $("grants-filter").addEventListener("input", drawGrants);
  $("generations-more").addEventListener("click", () => moreGenerations().catch(notify));

  let config;
  try {
    config = await settings();
  } catch (problem) {
    notify(problem);
    $("sign-in").disabled = true;
    return;
  }
  state.adminGroups = Array.isArray(config.admin_groups) ? config.admin_groups : [];
  $("signin-where").textContent = `You sign in at ${config.issuer}.`;
  $("sign-in").addEventListener("click", () => signIn(config).catch(notify));
  const query = new URLSearchParams(location.search);
  if (query.has("code") || query.has("error")) {
    try {
      await signedIn(await finishSignIn(config, query));
    } catch (problem) {
      notify(problem);
    }
  }
}

start();
