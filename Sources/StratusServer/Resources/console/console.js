// The Stratus console's only script: drives the index builds after a deploy, a step at a time,
// and shows their progress. Every other page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const box = document.querySelector("[data-index-build]");
  if (!box) return;
  const url = box.getAttribute("data-index-build");
  const token = box.getAttribute("data-csrf");
  const render = (builds, done) => {
    box.textContent = "";
    if (builds.length === 0) {
      const p = document.createElement("p");
      p.className = "progress-text";
      p.textContent = done ? "No index needs building: done." : "Waiting…";
      box.appendChild(p);
    }
    for (const build of builds) {
      const name = build.recordType + "." + build.field;
      const label = document.createElement("p");
      label.className = "progress-text";
      label.textContent = "Index " + name + ": " + build.built + " of " + build.total + " records" + (build.done ? " (done)" : "");
      const bar = document.createElement("progress");
      bar.max = Math.max(build.total, 1);
      bar.value = build.done ? bar.max : build.built;
      bar.setAttribute("aria-label", "index " + name);
      box.appendChild(label);
      box.appendChild(bar);
    }
    if (done) {
      const finished = document.createElement("p");
      finished.className = "notice";
      finished.id = "builds-done";
      finished.textContent = "Every index is built.";
      box.appendChild(finished);
    }
  };
  const step = async () => {
    try {
      const response = await fetch(url, { method: "POST", headers: { "X-CSRF-Token": token }, credentials: "same-origin" });
      const answer = await response.json();
      if (!response.ok) {
        box.textContent = answer.error || ("The server answered " + response.status);
        return;
      }
      render(answer.builds || [], answer.done === true);
      if (answer.done !== true) setTimeout(step, 200);
    } catch (error) {
      box.textContent = "The index build could not be reached: " + error;
    }
  };
  step();
});
