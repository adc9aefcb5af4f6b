// The rows of the indexed benchmark tables: id int64, text utf8 of 6-13
// words, vec fixed_size_list<float32,128> clustered around 64 centres.
import { arrow } from "../oracle/lib.mjs";

const words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
  "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"];
const D = 128;

export function makeBatcher(seed) {
  const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff; };
  const vecType = new arrow.FixedSizeList(D, new arrow.Field("item", new arrow.Float32(), true));
  const schema = new arrow.Schema([
    new arrow.Field("id", new arrow.Int64(), false),
    new arrow.Field("text", new arrow.Utf8(), true),
    new arrow.Field("vec", vecType, true),
  ]);
  function batch(start, n) {
    const ids = new BigInt64Array(n), vec = new Float32Array(n * D), texts = [];
    for (let i = 0; i < n; i++) {
      ids[i] = BigInt(start + i);
      const k = 6 + Math.floor(rnd() * 8), ws = [];
      for (let j = 0; j < k; j++) ws.push(words[Math.floor(rnd() * rnd() * words.length)]);
      texts.push(ws.join(" "));
      // clustered vectors: 64 centres plus noise, so IVF partitions mean something
      const c = Math.floor(rnd() * 64);
      for (let j = 0; j < D; j++) vec[i * D + j] = ((c * 31 + j * 7) % 64) / 64 + (rnd() - 0.5) * 0.2;
    }
    const vecData = arrow.makeData({ type: vecType, length: n, nullCount: 0,
      child: arrow.makeData({ type: new arrow.Float32(), length: n * D, data: vec }) });
    return new arrow.Table(schema, {
      id: arrow.makeVector(ids), text: arrow.vectorFromArray(texts, new arrow.Utf8()), vec: arrow.makeVector(vecData),
    });
  }
  return batch;
}
