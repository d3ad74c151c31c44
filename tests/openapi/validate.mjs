// Validates an OpenAPI document with a real OpenAPI 3 validator
// (@readme/openapi-parser, pinned in package-lock.json): the OpenAPI 3.0 JSON schema,
// $refs, and the rules a schema cannot say (path parameters match the path template,
// operation ids are unique).
//
//   node validate.mjs validate FILE        exit 0 when FILE is a valid document
//   node validate.mjs rejects_broken FILE  exit 0 when FILE is valid and every
//                                          deliberately broken copy of it is refused
//
// The second mode keeps the first honest: a validator that accepted anything (a
// missing package, a no-op) would make it fail.
import { readFileSync } from "node:fs";
import OpenAPIParser from "@readme/openapi-parser";

const [mode, file] = process.argv.slice(2);
if (!["validate", "rejects_broken"].includes(mode) || !file) {
  console.error("usage: node validate.mjs validate|rejects_broken FILE");
  process.exit(2);
}
const doc = JSON.parse(readFileSync(file, "utf8"));

// null when valid, else the validator's message.
async function problems(document) {
  try {
    await OpenAPIParser.validate(structuredClone(document));
    return null;
  } catch (err) {
    return String(err.message || err);
  }
}

function firstOperation(document, path) {
  const item = document.paths[path];
  if (!item) throw new Error(`the document has no path ${path}`);
  return Object.values(item)[0];
}

// Each returns a broken copy of the document; the validator must refuse all of them.
const breakages = {
  "operation without responses": (d) => {
    delete firstOperation(d, "/v1/sessions").responses;
  },
  "reference to a schema that does not exist": (d) => {
    firstOperation(d, "/v1/sessions/{id}").responses["200"].content["application/json"].schema = {
      $ref: "#/components/schemas/NoSuchSchema",
    };
  },
  "OpenAPI 3.1 type list in a 3.0 document": (d) => {
    d.components.schemas.Session.properties.ready_at = { type: ["string", "null"] };
  },
  "misspelt schema keyword": (d) => {
    d.components.schemas.Error.requried = ["error"];
  },
  "parameter in an unknown location": (d) => {
    firstOperation(d, "/v1/sessions").parameters[0].in = "body";
  },
  "response status that is not a status": (d) => {
    firstOperation(d, "/healthz").responses["2000"] = { description: "no such status" };
  },
  "document without info": (d) => {
    delete d.info;
  },
  "path parameter not declared": (d) => {
    const op = firstOperation(d, "/v1/sessions/{id}");
    op.parameters = op.parameters.filter((p) => p.in !== "path");
  },
  "path parameter that is not in the path": (d) => {
    firstOperation(d, "/v1/sessions").parameters.push({ name: "zz", in: "path", required: true, schema: { type: "string" } });
  },
  "operation id used twice": (d) => {
    const [a, b] = Object.values(d.paths["/v1/sessions/{id}"]);
    b.operationId = a.operationId;
  },
};

const found = await problems(doc);
if (found) {
  console.error(`invalid OpenAPI document ${file}:\n${found}`);
  process.exit(1);
}
const operations = Object.values(doc.paths).reduce((n, item) => n + Object.keys(item).length, 0);
console.log(`valid OpenAPI ${doc.openapi} document: ${Object.keys(doc.paths).length} paths, ${operations} operations`);
if (mode === "validate") process.exit(0);

let accepted = 0;
for (const [name, breakIt] of Object.entries(breakages)) {
  const broken = structuredClone(doc);
  breakIt(broken);
  const why = await problems(broken);
  if (why) {
    console.log(`refused as it must be: ${name}: ${why.split("\n")[0]}`);
  } else {
    console.error(`ACCEPTED a broken document: ${name}`);
    accepted++;
  }
}
process.exit(accepted === 0 ? 0 : 1);
