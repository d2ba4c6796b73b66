/** Lists kept per key in a Map. */

/** Appends `item` to the list under `key`, made the first time: a push, not a copy of the list per item. */
export function appendTo<K, V> (map: Map<K, V[]>, key: K, item: V): void {
  const list = map.get(key)
  if (list === undefined) map.set(key, [item])
  else list.push(item)
}
