// Validates constrained outputs with AJV (an independent JSON Schema implementation).
// Usage: node ajv_validate.js ASSETS_NODE_MODULES INPUT.json
// INPUT: [{"schema": {...}, "outputs": ["<json text>", ...]}, ...]
// Prints {"schemas": N, "outputs": M, "failures": [{"index", "output", "errors"}], "ajv_rejected": [...]}
'use strict';
const fs = require('fs');
const path = require('path');
const [modules, input] = process.argv.slice(2);
const Ajv = require(path.join(modules, 'ajv')).default;
// Draft 2020-12 where the schema uses its array keywords, draft-07 (AJV's default) otherwise.
const Ajv2020 = require(path.join(modules, 'ajv/dist/2020')).default;
const cases = JSON.parse(fs.readFileSync(input, 'utf8'));
const result = {schemas: 0, outputs: 0, failures: [], ajv_rejected: []};
cases.forEach((c, index) => {
  const Cls = JSON.stringify(c.schema).includes('"prefixItems"') ? Ajv2020 : Ajv;
  const ajv = new Cls({strict: false, allErrors: true, validateFormats: false});
  let validate;
  try {
    validate = ajv.compile(c.schema);
  } catch (e) {
    result.ajv_rejected.push({index, error: String(e.message)});
    return;
  }
  result.schemas++;
  for (const text of c.outputs) {
    result.outputs++;
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      result.failures.push({index, output: text, errors: 'JSON.parse: ' + e.message});
      continue;
    }
    if (!validate(value)) {
      result.failures.push({index, output: text, errors: ajv.errorsText(validate.errors)});
    }
  }
});
process.stdout.write(JSON.stringify(result));
