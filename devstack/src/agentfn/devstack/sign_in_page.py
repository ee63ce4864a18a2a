"""The dev issuer's sign-in page and its error page (Jinja, autoescaped: every value is shown as text) and their
stylesheet. No script at all; the Content-Security-Policy the issuer sends allows none."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in (development) · agentfn</title>
<link rel="stylesheet" href="{{ css }}">
</head>
<body>
<main>
<h1>Sign in to agentfn</h1>
<p class="warning" role="note"><strong>Development tool.</strong> This is the local platform's dev issuer: it signs in
anyone, as any subject and groups, without a password. It only listens on loopback. In a cluster, people sign in
at your organisation's OIDC issuer instead.</p>
<p><strong>{{ ask.client.client_id }}</strong> asks you to sign in; you will be sent back to
<span class="uri">{{ ask.redirect_uri }}</span>.</p>
<form method="post" action="{{ action }}">
{% for name, value in ask.hidden().items() %}<input type="hidden" name="{{ name }}" value="{{ value }}">
{% endfor %}
<p>
<label for="subject">Subject (who you are)</label>
<input id="subject" name="subject" type="text" value="{{ subject }}" required maxlength="255" autocomplete="username"
 autocapitalize="none" spellcheck="false" autofocus
 {%- if error %} aria-invalid="true" aria-describedby="subject-error"{% endif %}>
{% if error %}<span id="subject-error" class="error" role="alert">{{ error }}</span>{% endif %}
</p>
<fieldset>
<legend>Groups (what you may do)</legend>
{% for group in groups %}<p class="check"><input id="group-{{ loop.index }}" name="groups" type="checkbox"
 value="{{ group }}"{% if group in chosen %} checked{% endif %}> <label for="group-{{ loop.index }}">{{ group }}</label></p>
{% endfor %}
<p>
<label for="other-groups">Other groups (separated by commas)</label>
<input id="other-groups" name="other_groups" type="text" value="{{ other_groups }}" autocomplete="off"
 autocapitalize="none" spellcheck="false">
</p>
</fieldset>
<p class="actions">
<button type="submit" name="action" value="sign_in">Sign in</button>
<button type="submit" name="action" value="cancel" formnovalidate class="secondary">Cancel</button>
</p>
</form>
</main>
</body>
</html>
"""

ERROR = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign-in refused · agentfn</title>
<link rel="stylesheet" href="{{ css }}">
</head>
<body>
<main>
<h1>Sign-in refused</h1>
<p class="error" role="alert">{{ detail }}</p>
<p>Nothing was sent back to the application. Go back to it and start again; if this keeps happening, its
sign-in settings (client ID and redirect URI) do not match this issuer's.</p>
</main>
</body>
</html>
"""

CSS = """:root { color-scheme: light dark; --fg: #1b1b1f; --bg: #fafafa; --muted: #4a4a55; --accent: #0b57d0;
  --warn-bg: #fff4ce; --warn-fg: #4d3800; --error: #b3261e; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e6ea; --bg: #16161a; --muted: #b8b8c4; --accent: #a8c7fa;
  --warn-bg: #3d3000; --warn-fg: #ffe9a8; --error: #ffb4ab; } }
* { box-sizing: border-box; }
body { margin: 0; font: 1rem/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
main { max-width: 34rem; margin: 0 auto; padding: 1.5rem 1rem; }
h1 { font-size: 1.5rem; margin: 0 0 1rem; }
.warning { background: var(--warn-bg); color: var(--warn-fg); padding: .75rem 1rem; border-radius: .5rem; }
.uri { font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
label { display: block; font-weight: 600; }
.check label { display: inline; font-weight: normal; }
input[type=text] { width: 100%; padding: .5rem; font: inherit; color: inherit; background: transparent;
  border: 1px solid var(--muted); border-radius: .375rem; }
input[type=checkbox] { width: 1.1rem; height: 1.1rem; vertical-align: middle; }
fieldset { border: 1px solid var(--muted); border-radius: .5rem; margin: 1rem 0; }
.check { margin: .25rem 0; }
.error { display: block; color: var(--error); font-weight: 600; }
.actions { display: flex; gap: .75rem; flex-wrap: wrap; }
button { font: inherit; padding: .5rem 1.25rem; border-radius: .375rem; border: 1px solid var(--accent);
  background: var(--accent); color: var(--bg); cursor: pointer; }
button.secondary { background: transparent; color: var(--accent); }
:focus-visible { outline: 3px solid var(--accent); outline-offset: 2px; }
"""
