"""The Memory Inspector: a static web page (``static/``) served by ``session-server serve``.

Plain HTML, CSS and JavaScript, no build step and nothing loaded from elsewhere: the page
talks JSON-RPC over a WebSocket to the server that served it (see ``http_routes`` and
``docs/inspector.md``). This package holds no Python code; it exists so the files ship in
the wheel and are found with ``importlib.resources``.
"""

__all__: list[str] = []
