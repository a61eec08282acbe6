/* The portal's one live connection: /ws/stream/ (see docs/streams.md).
 *
 * Pages say which topics they need with GP.want("jobs" | "cluster" | "utilization") while their
 * scripts run; the socket asks for exactly those (/ws/stream/?topics=...), so a jobs page never
 * receives the cluster's GPU utilization. Pages register handlers with GP.on(type, fn); every
 * JSON payload is dispatched by its "type", and each update of a "jobs.status" batch is also
 * dispatched as a "job.status". The connection is retried with capped exponential backoff; after
 * a reconnect, "reconnected" handlers run so pages can re-read what they may have missed. After
 * 4440 (a single sign-on session due for its check with the provider) the page loads itself
 * again instead (GP.recheckSignIn).
 * Read-only: nothing is sent. */
(function () {
  "use strict";

  var handlers = {};
  var GP = (window.GP = window.GP || {});
  GP.STATE_LABELS = {
    pending: "Pending",
    running: "Running",
    preempted: "Preempted (stopping)",
    succeeded: "Succeeded",
    failed: "Failed",
    cancelled: "Cancelled"
  };
  GP.LIVE_STATES = ["pending", "running", "preempted"];
  var MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  function twoDigits(n) {
    return (n < 10 ? "0" : "") + n;
  }
  // "Mar 4, 09:30" in UTC: what the server renders with Django's date:"M j, H:i" (TIME_ZONE is
  // UTC), so a row painted live reads like the row the page came with.
  GP.utcMinute = function (iso) {
    var d = new Date(iso);
    if (isNaN(d)) return "";
    return (
      MONTHS[d.getUTCMonth()] + " " + d.getUTCDate() + ", " +
      twoDigits(d.getUTCHours()) + ":" + twoDigits(d.getUTCMinutes())
    );
  };
  // A job row's state badge and "why pending" cell from a job.status payload (job tables and
  // array member tables share the markup). A why cell marked data-shows-estimate (the job
  // tables') also gets the pending job's estimated start, as templates/frontend/_job_rows.html
  // renders it; without it a live update or a resync dropped the note the page came with.
  GP.paintJobRow = function (row, msg) {
    var badge = row.querySelector("[data-field=state]");
    if (badge) {
      badge.className = "state state-" + msg.state;
      badge.textContent = GP.STATE_LABELS[msg.state] || msg.state;
    }
    var why = row.querySelector("[data-field=why]");
    if (!why) return;
    var pending = msg.state === "pending";
    why.textContent = pending ? msg.why || "" : "";
    var when = pending && msg.estimated_start ? GP.utcMinute(msg.estimated_start) : "";
    if (when && why.hasAttribute("data-shows-estimate")) {
      var note = GP.el("span", { class: "muted" }, "est. start ");
      note.appendChild(GP.el("time", { datetime: msg.estimated_start }, when));
      note.appendChild(document.createTextNode(" UTC"));
      why.appendChild(document.createTextNode(" "));
      why.appendChild(note);
    }
  };
  var topics = [];
  GP.want = function () {
    Array.prototype.forEach.call(arguments, function (topic) {
      if (topics.indexOf(topic) < 0) topics.push(topic);
    });
  };
  GP.on = function (type, fn) {
    (handlers[type] = handlers[type] || []).push(fn);
  };
  GP.emit = function (type, msg) {
    (handlers[type] || []).forEach(function (fn) {
      try {
        fn(msg);
      } catch (err) {
        if (window.console) console.error(err);
      }
    });
  };
  GP.timeOf = function (iso) {
    var d = iso ? new Date(iso) : new Date();
    return isNaN(d) ? "" : d.toISOString().substring(11, 19);
  };
  GP.el = function (tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      node.setAttribute(key, attrs[key]);
    });
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  };

  /* A read of server state that a page repeats when the stream announces a change: it returns
   * request(ms), which reads url (a string, or a function giving one, or null for "nothing to
   * read") ms later (delayMs when ms is not a number: a handler's argument is a message) and
   * hands the JSON to apply. A request joins a read already waiting to start, or brings it
   * forward. A request made while a read is in flight means the answer may predate the change
   * that was announced: that answer is dropped and the state read again (never two answers in a
   * row, so a page under a steady stream of changes still moves). A read that fails,
   * answers 5xx or takes longer than READ_TIMEOUT_MS is retried after 1 s, then 2, 4… up to 30 s
   * (not once the stream is closed: signed out); a 4xx or a redirect (to the login page) is not
   * retried, since this page cannot read it. */
  var READ_TIMEOUT_MS = 15000;
  var READ_RETRY_FIRST_MS = 1000;
  var READ_RETRY_MAX_MS = 30000;
  GP.stateReader = function (url, apply, delayMs) {
    var timer = null;
    var dueAt = 0;
    var inFlight = false;
    var againMs = null; // a request during the read in flight: read again this soon after it
    var dropped = false; // the last answer was dropped (at most one in a row is)
    var retryMs = READ_RETRY_FIRST_MS;

    function schedule(ms) {
      var at = Date.now() + ms;
      if (timer !== null) {
        if (dueAt <= at) return;
        window.clearTimeout(timer);
      }
      dueAt = at;
      timer = window.setTimeout(read, ms);
    }
    function retry() {
      if (GP.streamState === "closed") return;
      schedule(retryMs);
      retryMs = Math.min(retryMs * 2, READ_RETRY_MAX_MS);
    }
    function landed() {
      inFlight = false;
      var again = againMs;
      againMs = null;
      return again;
    }
    function read() {
      timer = null;
      var target = typeof url === "function" ? url() : url;
      if (!target || !window.fetch) return;
      inFlight = true;
      var abort = new window.AbortController();
      var deadline = window.setTimeout(function () {
        abort.abort();
      }, READ_TIMEOUT_MS);
      window
        .fetch(target, {
          credentials: "same-origin",
          headers: { Accept: "application/json" },
          signal: abort.signal
        })
        .then(function (r) {
          if (r.redirected || (r.status >= 400 && r.status < 500)) return undefined;
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.json();
        })
        .then(
          function (data) {
            window.clearTimeout(deadline);
            retryMs = READ_RETRY_FIRST_MS;
            var again = landed();
            if (again !== null && !dropped) {
              dropped = true;
              schedule(again);
              return;
            }
            dropped = false;
            if (data !== undefined) {
              try {
                apply(data);
              } catch (err) {
                if (window.console) console.error(err);
              }
            }
            if (again !== null) schedule(again);
          },
          function () {
            window.clearTimeout(deadline);
            landed(); // the retry reads afresh anyway
            retry();
          }
        );
    }
    function request(ms) {
      var wait = typeof ms === "number" ? ms : delayMs;
      if (inFlight) againMs = againMs === null ? wait : Math.min(againMs, wait);
      else schedule(wait);
    }
    // For a page whose messages paint what the read paints too: a message that lands during a
    // read calls request() so that the read's answer, which may be older, is not applied.
    request.inFlight = function () {
      return inFlight;
    };
    return request;
  };

  // A GP.stateReader of the states of the job rows rowSelector matches (/jobs/states/?ids=…),
  // each row painted with paint(row, {state, why, estimated_start}).
  GP.jobRowsReader = function (rowSelector, paint, delayMs) {
    return GP.stateReader(
      function () {
        var ids = [];
        document.querySelectorAll(rowSelector).forEach(function (row) {
          ids.push(row.getAttribute("data-job"));
        });
        return ids.length ? "/jobs/states/?ids=" + ids.join(",") : null;
      },
      function (data) {
        document.querySelectorAll(rowSelector).forEach(function (row) {
          var job = data.jobs[row.getAttribute("data-job")];
          if (job) paint(row, job);
        });
      },
      delayMs
    );
  };

  var badge = document.getElementById("live-status");
  function setState(state, text) {
    GP.streamState = state;
    document.documentElement.setAttribute("data-stream", state);
    if (badge) {
      badge.setAttribute("data-state", state);
      badge.querySelector(".text").textContent = text;
    }
  }

  // The websocket URL of a path on this server (wss:// under https).
  GP.wsUrl = function (path) {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    return scheme + window.location.host + path;
  };

  var delay = 500;
  var opened = false;

  // 4440: the session's single sign-on check with the provider is due, and only a page load
  // makes it (the server sends the browser to the provider and back: silently while the
  // provider still signs the user in, to the login page once it does not); a reconnected socket
  // would be refused again. So the page loads itself again, by GET (a page rendered from a
  // form's POST is not posted twice), except when that would lose something or loop: after the
  // user typed into the page (their next page load re-checks), or on a page that was itself
  // loaded so and refused before it went live (the load did not renew the session).
  GP.CLOSE_SSO_RECHECK = 4440;
  var RECHECK_KEY = "gp.signInRecheck";
  var reloadedToRecheck = false;
  var edited = false;
  var reloading = false;
  try {
    reloadedToRecheck = window.sessionStorage.getItem(RECHECK_KEY) !== null;
    window.sessionStorage.removeItem(RECHECK_KEY);
  } catch (err) {
    // storage refused (a privacy setting): no loop guard, every 4440 reloads
  }
  document.addEventListener("input", function () {
    edited = true;
  });
  GP.recheckSignIn = function () {
    if (reloading) return; // both sockets of a job page close with 4440
    if (edited) {
      setState("closed", "Sign-in check due: reload the page");
      return;
    }
    if (reloadedToRecheck && !opened) {
      setState("closed", "Sign-in expired");
      return;
    }
    reloading = true;
    setState("reconnecting", "Checking sign-in…");
    try {
      window.sessionStorage.setItem(RECHECK_KEY, "1");
    } catch (err) {
      // as above
    }
    // Without the fragment: the same URL with one would only scroll, not load.
    window.location.replace(window.location.href.split("#")[0]);
  };

  function connect() {
    var socket = new WebSocket(GP.wsUrl("/ws/stream/?topics=" + topics.sort().join(",")));
    socket.onmessage = function (event) {
      var msg;
      try {
        msg = JSON.parse(event.data);
      } catch (err) {
        return;
      }
      if (msg.type === "hello") {
        delay = 500;
        setState("open", "Live");
        if (opened) GP.emit("reconnected", msg);
        opened = true;
      }
      GP.emit(msg.type, msg);
      if (msg.type === "jobs.status") (msg.jobs || []).forEach(function (job) {
        GP.emit("job.status", job);
      });
    };
    socket.onclose = function (event) {
      if (event.code === 4401) {
        setState("closed", "Signed out");
        return;
      }
      if (event.code === GP.CLOSE_SSO_RECHECK) {
        GP.recheckSignIn();
        return;
      }
      if (event.code === 4429) {
        // Too many of this user's pages hold a socket: try again slowly, one may close.
        setState("reconnecting", "Too many open pages; retrying…");
        delay = 15000;
      } else {
        setState("reconnecting", "Reconnecting…");
      }
      window.setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
  }
  setState("connecting", "Connecting…");
  // Connect once every page script has run and registered its handlers: while the parser waits
  // for a later script, socket events could otherwise be dispatched to nobody.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", connect);
  else connect();
})();
