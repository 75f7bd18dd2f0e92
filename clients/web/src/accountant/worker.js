// The accountant's module worker: it answers the requests of ../accountant_runner.js,
// one at a time, so the page's main thread never runs the accountant.
//
//   new Worker(new URL("./accountant/worker.js", import.meta.url), { type: "module" })

import { answer } from "./service.js";

self.addEventListener("message", (event) => self.postMessage(answer(event.data)));
