import { withThousands } from '../../src/contract/text';

describe('withThousands', () => {
  it.each([
    [0, '0'],
    [999, '999'],
    [1000, '1,000'],
    [10_000, '10,000'],
    [1_234_567, '1,234,567'],
    [10_000_000, '10,000,000'],
  ])('writes %d as %s, as messages and OpenAPI show limits', (n, text) => {
    expect(withThousands(n)).toBe(text);
  });
});
