// The five endpoints of the original flow.
import { createClient } from "@sema/client";

const { legacy } = createClient();
console.log(await legacy.create("printer", 1)); // { name, value, created }
console.log(await legacy.down("printer")); // 0
console.log(await legacy.down("printer")); // null: "Semaphore locked"
console.log(await legacy.up("printer")); // 1
console.log(await legacy.value("printer")); // 1
console.log(await legacy.delete("printer")); // true
