// Placer dashboard: live refresh of tables, the job event stream, drag and drop upload, confirmed
// deletes, and the new-comparison form's solvers filtered by the chosen objective.
"use strict";

function refreshLive(box) {
  // Re-fetch the box's fragment every 1.5 s while it holds a [data-live] element.
  const url = box.getAttribute("data-refresh");
  const tick = async () => {
    if (!box.querySelector("[data-live]")) return;
    try {
      const r = await fetch(url, {credentials: "same-origin", headers: {"Accept": "text/html"}});
      if (r.ok) {
        const focused = document.activeElement && document.activeElement.id;
        box.innerHTML = await r.text();
        if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
      }
    } catch (e) { /* the next tick retries */ }
    setTimeout(tick, 1500);
  };
  setTimeout(tick, 1000);
}

function followJob(card) {
  // The job's Server-Sent Events: progress updates the bar; the end reloads the page.
  const source = new EventSource(card.getAttribute("data-events"));
  const bar = card.querySelector("[data-job-progress]");
  const message = card.querySelector("[data-job-message]");
  const status = document.querySelector("[data-job-status]");
  const ms = (s) => (s === null || s === undefined) ? "–" : (s * 1000).toPrecision(3) + " ms";
  source.addEventListener("progress", (ev) => {
    const p = JSON.parse(ev.data);
    if (p.fraction !== null && p.fraction !== undefined) bar.value = p.fraction;
    if (p.message) message.textContent = p.message;
    const inc = card.querySelector("[data-job-incumbent]");
    const bound = card.querySelector("[data-job-bound]");
    if (inc && p.incumbent_s !== undefined) inc.textContent = ms(p.incumbent_s);
    if (bound && p.bound_s !== undefined) bound.textContent = ms(p.bound_s);
  });
  source.addEventListener("state", (ev) => {
    const s = JSON.parse(ev.data);
    if (s.status && status) { status.textContent = s.status; status.className = "badge " + s.status; }
  });
  source.addEventListener("end", () => { source.close(); window.location.reload(); });
}

function dropZone(zone) {
  const input = zone.querySelector("input[type=file]");
  ["dragenter", "dragover"].forEach((t) => zone.addEventListener(t, (e) => {
    e.preventDefault(); zone.classList.add("over");
  }));
  ["dragleave", "drop"].forEach((t) => zone.addEventListener(t, () => zone.classList.remove("over")));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    if (e.dataTransfer && e.dataTransfer.files.length) {
      input.files = e.dataTransfer.files;
      input.dispatchEvent(new Event("change"));
    }
  });
}

function solverFilter(form) {
  // Offer only the solvers that answer the chosen objective (the server checks again).
  const objective = form.querySelector("select[name=objective]");
  const pass = form.querySelector("select[name=pass]");
  const update = () => {
    if (pass) pass.disabled = objective.value !== "latency";  // a throughput plan runs forward and backward
    form.querySelectorAll("[data-objectives]").forEach((item) => {
      const fits = item.getAttribute("data-objectives").split(" ").includes(objective.value);
      item.hidden = !fits;
      const box = item.querySelector("input[type=checkbox]");
      if (box) { box.disabled = !fits; if (!fits) box.checked = false; }
    });
  };
  objective.addEventListener("change", () => {
    update();
    // a new objective: its default solvers, as the server preselects them
    form.querySelectorAll("[data-default-for]").forEach((item) => {
      const box = item.querySelector("input[type=checkbox]");
      if (box && !box.disabled) box.checked = item.getAttribute("data-default-for").split(" ").includes(objective.value);
    });
  });
  update();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form[data-confirm]").forEach((f) => f.addEventListener("submit", (e) => {
    if (!window.confirm(f.getAttribute("data-confirm"))) e.preventDefault();
  }));
  document.querySelectorAll("form[data-solver-filter]").forEach(solverFilter);
  document.querySelectorAll("[data-refresh]").forEach(refreshLive);
  document.querySelectorAll("[data-events]").forEach(followJob);
  document.querySelectorAll("[data-drop]").forEach(dropZone);
  document.querySelectorAll("select[data-autosubmit]").forEach((s) =>
    s.addEventListener("change", () => s.form.submit()));
});
