#!/usr/bin/env node
// Launches the local Cosmos DB test server (@vercel/cosmosdb-server) for Casekeeper's tests.
//
// Usage: node devhost/cosmos_server.js PORT     (PORT 0 = let the OS pick a free port)
//
// Contract with devhost/cosmos_server.py:
// - listens on 127.0.0.1 only (HTTPS, the package's self-signed certificate; the Python SDK skips TLS
//   checks for 127.0.0.1 and localhost), with keep-alive on;
// - once listening, prints exactly one line `LISTENING <port>` on stdout;
// - exits when its stdin closes (so a crashed or killed test run never leaves it behind) or on
//   SIGTERM / SIGINT.
"use strict";

const { createHttpsServer } = require("@vercel/cosmosdb-server");

// Without keepAlive the package answers every request with `Connection: close`, and each SDK call then
// pays a fresh TLS handshake (about 60 ms instead of about 6 ms).
const server = createHttpsServer({ keepAlive: true });

// `GET /dbs/<db>/colls/<coll>/docs/<id>` is a point read. The package's single-partition read path
// dereferences the stored document before checking that it exists, so a read of a missing document
// crashes into a 500 instead of a 404. Its cross-partition path is correct (it looks the document up
// by the partition key header and id and answers 404 when absent), so we route every point read there.
const POINT_READ = /^\/+dbs\/[^/]+\/colls\/[^/]+\/docs\/[^/]+\/*$/;
const CROSS_PARTITION_HEADER = "x-ms-documentdb-query-enablecrosspartition";

// Cosmos DB refuses an item over 2 MB (413, RequestEntityTooLarge); the package stores any size. A create,
// upsert or replace of one document whose request body is over the limit is refused here as Cosmos DB does,
// so a test that writes too large a case fails as it would in Azure.
const MAX_ITEM_BYTES = 2 * 1024 * 1024;
const DOCS = /^\/+dbs\/[^/]+\/colls\/[^/]+\/docs(\/[^/]+)?\/*$/;

function tooLarge(req) {
  if (req.method !== "POST" && req.method !== "PUT") return false;
  if (req.headers["x-ms-documentdb-isquery"] || req.headers["x-ms-cosmos-is-batch-request"]) return false;
  if (!DOCS.test((req.url || "").split("?", 1)[0])) return false;
  return Number(req.headers["content-length"] || 0) > MAX_ITEM_BYTES;
}

// Faults for tests, per database (each test has its own): `POST /_casekeeper/faults` with
// `{"database": "<id>", "delayMs": N, "throttleMs": M}` delays every request on that database's documents by N
// ms before serving it (a slow or stalled store), or, with M > 0, answers it 429 with `x-ms-retry-after-ms: M`
// (throttling), as Cosmos DB does; `{"database": "<id>"}` alone clears them.
const FAULTS_PATH = "/_casekeeper/faults";
const faults = new Map();
const DATABASE_DOCS = /^\/+dbs\/([^/]+)\/colls\/[^/]+\/docs/;

function setFaults(req, res) {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    let spec;
    try {
      spec = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch (err) {
      res.writeHead(400);
      res.end(String(err));
      return;
    }
    if (typeof spec.database !== "string" || !spec.database) {
      res.writeHead(400);
      res.end("database is required");
      return;
    }
    const delayMs = Number(spec.delayMs || 0);
    const throttleMs = Number(spec.throttleMs || 0);
    if (delayMs > 0 || throttleMs > 0) faults.set(spec.database, { delayMs, throttleMs });
    else faults.delete(spec.database);
    res.writeHead(204);
    res.end();
  });
}

function faultOf(req) {
  const match = DATABASE_DOCS.exec((req.url || "").split("?", 1)[0]);
  return match ? faults.get(decodeURIComponent(match[1])) : undefined;
}

const packageHandlers = server.listeners("request");
if (packageHandlers.length !== 1) {
  // A different package version wired its handler differently: fail loudly rather than serve wrongly.
  process.stderr.write(`expected one request listener from the package, found ${packageHandlers.length}\n`);
  process.exit(2);
}
const [packageHandler] = packageHandlers;
server.removeAllListeners("request");
server.on("request", (req, res) => {
  if (req.method === "POST" && (req.url || "").split("?", 1)[0] === FAULTS_PATH) {
    setFaults(req, res);
    return;
  }
  const fault = faultOf(req);
  if (fault && fault.throttleMs > 0) {
    req.resume();
    const body = JSON.stringify({ code: "TooManyRequests", message: "Request rate is large (test fault)" });
    res.writeHead(429, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      "x-ms-retry-after-ms": String(fault.throttleMs),
    });
    res.end(body);
    return;
  }
  if (fault && fault.delayMs > 0) {
    setTimeout(() => serve(req, res), fault.delayMs);
    return;
  }
  serve(req, res);
});

function serve(req, res) {
  if (tooLarge(req)) {
    req.resume();
    const body = JSON.stringify({ code: "RequestEntityTooLarge", message: "Request size is too large" });
    res.writeHead(413, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
    return;
  }
  if (req.method === "GET") {
    const pathname = (req.url || "").split("?", 1)[0];
    if (POINT_READ.test(pathname)) {
      req.headers[CROSS_PARTITION_HEADER] = "true";
    }
  }
  packageHandler.call(server, req, res);
}

const requested = process.argv[2] === undefined ? 0 : Number(process.argv[2]);
if (!Number.isInteger(requested) || requested < 0 || requested > 65535) {
  process.stderr.write(`usage: cosmos_server.js PORT (0-65535, 0 = any free port); got ${process.argv[2]}\n`);
  process.exit(2);
}

let stopping = false;
function stop() {
  if (stopping) return;
  stopping = true;
  // Keep-alive sockets would hold close() open; the data is in memory and disposable anyway.
  if (typeof server.closeAllConnections === "function") server.closeAllConnections();
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1000).unref();
}

server.on("error", (err) => {
  process.stderr.write(`cosmos test server failed: ${err.stack || err}\n`);
  process.exit(1);
});

server.listen(requested, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});

process.on("SIGTERM", stop);
process.on("SIGINT", stop);
// The parent holds our stdin open; when it goes away (normal stop, crash, kill -9), so do we.
process.stdin.on("end", stop);
process.stdin.on("close", stop);
process.stdin.on("error", stop);
process.stdin.resume();
