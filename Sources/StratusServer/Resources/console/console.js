// The Stratus console's only script: narrows a query filter's comparators and value input to
// the field chosen, and drives the index builds after a deploy, a step at a time, showing their
// progress. Every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // On a phone, the menu and the records page's forms fold under their summaries.
  if (window.matchMedia("(max-width: 40rem)").matches) {
    for (const details of document.querySelectorAll("details[data-phone-closed]")) details.open = false;
  }
  // The record editor: a file chosen for an asset field is uploaded when the form is saved, as an
  // app uploads one (an upload URL, then the bytes), and its receipt saved with the record.
  for (const form of document.querySelectorAll("form[data-asset-upload]")) {
    form.addEventListener("submit", async (event) => {
      const pending = Array.from(form.querySelectorAll("input[type=file][data-asset-field]")).filter((input) => input.files.length > 0);
      const receipts = pending.map((input) => form.querySelector(`input[data-asset-receipt="${input.dataset.assetField}"]`));
      if (pending.length === 0 || receipts.every((receipt) => receipt && receipt.value)) return;
      event.preventDefault();
      const submit = form.querySelector("button[type=submit]");
      if (submit) submit.disabled = true;
      try {
        for (const [index, input] of pending.entries()) {
          const ask = new URLSearchParams();
          for (const name of ["environment", "database", "user", "reason", "zone", "type", "name"]) {
            const field = form.querySelector(`[name="${name}"]`);
            if (field && field.value) ask.set(name, field.value);
          }
          ask.set("field", input.dataset.assetField);
          const answer = await fetch(form.dataset.assetUpload, { method: "POST", credentials: "same-origin", body: ask,
            headers: { "X-CSRF-Token": form.dataset.csrf } });
          const place = await answer.json();
          if (!answer.ok) throw new Error(place.error || ("the server answered " + answer.status));
          const file = input.files[0];
          const sent = await fetch(place.url, { method: "POST", body: file, headers: { "Content-Type": file.type || "application/octet-stream" } });
          const upload = await sent.json();
          if (!sent.ok) throw new Error(upload.reason || ("the upload was answered " + sent.status));
          receipts[index].value = JSON.stringify(upload.singleFile);
        }
        form.submit();
      } catch (error) {
        if (submit) submit.disabled = false;
        let message = form.querySelector(".upload-error");
        if (!message) {
          message = document.createElement("p");
          message.className = "error upload-error";
          message.setAttribute("role", "alert");
          form.prepend(message);
        }
        message.textContent = "The file could not be uploaded, so nothing was saved: " + error.message;
      }
    });
  }
  for (const row of document.querySelectorAll("[data-filter]")) {
    const field = row.querySelector("[data-filter-field]");
    const comparator = row.querySelector("[data-filter-comparator]");
    const value = row.querySelector("[data-filter-value]");
    if (!field || !comparator || !value) continue;
    const all = Array.from(comparator.options).map((option) => option.value);
    const narrow = () => {
      const chosen = field.selectedOptions[0];
      const allowed = chosen && chosen.dataset.comparators ? chosen.dataset.comparators.split(" ") : all;
      const current = comparator.value;
      comparator.textContent = "";
      for (const name of allowed) {
        const option = document.createElement("option");
        option.textContent = name;
        option.selected = name === current;
        comparator.appendChild(option);
      }
      if (chosen && chosen.dataset.input) {
        value.inputMode = chosen.dataset.input;
        value.placeholder = chosen.dataset.hint || "";
      }
    };
    field.addEventListener("change", narrow);
    narrow();
  }
});
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
