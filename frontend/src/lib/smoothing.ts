// Exponential moving average as W&B smooths curves: each point is weight * previous + (1 - weight) * value,
// debiased by 1 - weight^n so the first points are not pulled toward zero; gaps (null) are kept and skipped.
export function smooth(values: (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return values.slice();
  let last = 0;
  let n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return null;
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - weight ** n);
  });
}
